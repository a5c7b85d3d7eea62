#!/usr/bin/env bash
# Start, crash and stop a Strata daemon for the end-to-end tests.
#
# Source it for the functions, or run it:
#   strata-env.sh crash     kill -9 the daemon and start it again (the NFS suite's restart)
#   strata-env.sh kill      kill -9 the daemon, no restart      (the DB crash tests' CRASH_CMD)
#   strata-env.sh recover   start it again and require the intent-log replay (their RESTART_CMD)
#   strata-env.sh commit    commit the default pool now         (their PRE_CRASH_CMD)
#
#   STRATA_E2E_DIR   working directory (daemon data, log, pid)  default /var/tmp/strata-e2e
#   STRATA_SOCKET    the daemon's control socket: always $STRATA_E2E_DIR/strata.sock, set
#                    (and exported) by strata_start, since scripts change STRATA_E2E_DIR
#                    after sourcing this file
#   STRATA_BIN       the strata binary                          default target/debug/strata
set -euo pipefail
: "${STRATA_E2E_DIR:=/var/tmp/strata-e2e}"
STRATA_SOCKET="$STRATA_E2E_DIR/strata.sock"
: "${STRATA_BIN:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/target/debug/strata}"
export STRATA_E2E_DIR STRATA_SOCKET STRATA_BIN
unset STRATA_API  # the e2e daemons are reached through their socket

strata_start() {
  export STRATA_SOCKET="$STRATA_E2E_DIR/strata.sock"
  mkdir -p "$STRATA_E2E_DIR"
  # --config /dev/null: never the machine's /etc/strata/strata.toml.
  "$STRATA_BIN" serve --config /dev/null --data-dir "$STRATA_E2E_DIR/data" --default-pool-size "${STRATA_POOL_SIZE:-8G}" \
      ${STRATA_SERVE_ARGS:-} >>"$STRATA_E2E_DIR/daemon.log" 2>&1 &
  echo $! >"$STRATA_E2E_DIR/daemon.pid"
  for _ in $(seq 1 200); do
    if "$STRATA_BIN" pool list >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$(cat "$STRATA_E2E_DIR/daemon.pid")" 2>/dev/null; then
      echo "strata daemon died at start:"; tail -20 "$STRATA_E2E_DIR/daemon.log"; return 1
    fi
    sleep 0.1
  done
  echo "strata daemon did not come up in 20 s"; tail -20 "$STRATA_E2E_DIR/daemon.log"; return 1
}

# strata_crash_test_settings: the daemon settings of the DB crash tests (call before
# strata_start). Their crash must find the commits the load acknowledged in its last
# seconds in the intent log only, so no commit may land between strata_commit (their
# PRE_CRASH_CMD, a few seconds before the crash) and the crash: not the periodic one
# (--txg-interval 300, the most allowed), not one for dirty data (--dirty-limit 1G: commits
# start at half of it; seconds of load dirty far less), and not one for a full log region (a
# 16G pool's region is 256 MiB, the most there is; pgbench here logs up to ~26 MiB/s). A
# --txg-interval / --dirty-limit in STRATA_SERVE_ARGS, or a STRATA_POOL_SIZE, given by the
# caller wins.
strata_crash_test_settings() {
  case " ${STRATA_SERVE_ARGS:-} " in
    *" --txg-interval"*) ;;
    *) STRATA_SERVE_ARGS="${STRATA_SERVE_ARGS:-} --txg-interval 300" ;;
  esac
  case " $STRATA_SERVE_ARGS " in
    *" --dirty-limit"*) ;;
    *) STRATA_SERVE_ARGS="$STRATA_SERVE_ARGS --dirty-limit 1G" ;;
  esac
  export STRATA_SERVE_ARGS STRATA_POOL_SIZE="${STRATA_POOL_SIZE:-16G}"
}

# strata_mount VOLUME DIR [volume create args...]: create (if needed) and mount default/VOLUME.
strata_mount() {
  local vol="$1" dir="$2"; shift 2
  "$STRATA_BIN" volume show "default/$vol" >/dev/null 2>&1 || "$STRATA_BIN" volume create "default/$vol" "$@"
  "$STRATA_BIN" mount "default/$vol" "$dir"
}

# strata_kill: the daemon's power failure. Freeze it (SIGSTOP: from that instant nothing
# more reaches the pool), kill -9 it, and wait until it is gone (a zombie its parent has
# not reaped yet counts as gone: its files, /dev/fuse included, are closed). Its mounts go
# ENOTCONN and the requests it held fail. Writes the marker line strata_recover looks for.
strata_kill() {
  local pid; pid="$(cat "$STRATA_E2E_DIR/daemon.pid")"
  kill -STOP "$pid" 2>/dev/null || { echo "strata daemon $pid is not running"; return 1; }
  kill -KILL "$pid"
  for _ in $(seq 1 600); do
    # Gone, or a zombie with no thread left (the leader shows Z while its other threads
    # still exit, holding the socket and the mounts).
    if ! kill -0 "$pid" 2>/dev/null || { [ "$(ps -o stat= -p "$pid" 2>/dev/null | cut -c1)" = Z ] &&
        [ "$(ls "/proc/$pid/task" 2>/dev/null | wc -l)" -le 1 ]; }; then
      echo "strata: daemon $pid killed with SIGKILL" >>"$STRATA_E2E_DIR/daemon.log"
      return 0
    fi
    sleep 0.05
  done
  echo "strata daemon $pid still alive 30 s after SIGKILL"; return 1
}

# The crash a database must survive: kill -9 the daemon (its mounts go ENOTCONN), start it
# again; it reopens the pool at its last committed txg, replays the intent log and remounts
# where it was.
strata_crash() {
  strata_kill
  strata_start
}

# strata_commit [POOL]: make POOL (default: default) commit now, and record the txg in
# $STRATA_E2E_DIR/commit.txg for strata_recover. The DB crash tests run it under load a few
# seconds before the crash (PRE_CRASH_CMD): everything before it is committed (also what a
# database's installation wrote without fsync), and the intent log starts empty, so the
# commits acknowledged after it are in the log only, and the crash must replay them. (A
# `pool set` commits; setting the capacity alert to its current value changes nothing else.)
strata_commit() {
  local pool="${1:-default}" cap txg
  cap="$("$STRATA_BIN" pool status "$pool" --json | grep -oE '"capacity_alert_percent": *[0-9]+' | grep -oE '[0-9]+$')"
  "$STRATA_BIN" pool set "$pool" --capacity-alert "$cap" >/dev/null
  txg="$("$STRATA_BIN" pool status "$pool" --json | grep -oE '"txg": *[0-9]+' | head -n 1 | grep -oE '[0-9]+$')"
  echo "$txg" >"$STRATA_E2E_DIR/commit.txg"
  echo "strata: pool $pool committed txg $txg"
}

# strata_recover [POOL]: after strata_kill, start the daemon again and require that opening
# POOL (default: default) replayed intent-log records: the engine's open note
#   replayed N operations (G groups) from the intent log
# (engine intent_log_replay.rs), which the daemon logs at start as
#   <time>  WARN strata_daemon::service::pools: replayed N operations (G groups) from the intent log pool=POOL
# followed by "pool opened pool=POOL txg=T" (T: the commit that ended the replay). Only lines
# after the last kill count, and N must be above 0. Without it the crash did not test the
# intent log: the acknowledged syncs were all in a committed txg already. With the txg
# strata_commit recorded, also reports commits that landed after it (a full log region, the
# dirty limit, the txg interval: strata_crash_test_settings is meant to rule them out).
strata_recover() {
  local pool="${1:-default}" logf="$STRATA_E2E_DIR/daemon.log" from since line ops groups txg start=""
  from="$(grep -n -E '^strata: daemon [0-9]+ killed with SIGKILL' "$logf" | tail -n 1 | cut -d: -f1)"
  [ -n "$from" ] || { echo "strata_recover: no kill of the daemon in $logf"; return 1; }
  strata_start
  [ -f "$STRATA_E2E_DIR/commit.txg" ] && start="$(cat "$STRATA_E2E_DIR/commit.txg")"
  since="$(tail -n +"$from" "$logf")"
  txg="$(printf '%s\n' "$since" | sed -nE "s/^[0-9TZ:.-]+ +INFO .*: pool opened pool=$pool txg=([0-9]+)\$/\1/p" | tail -n 1)"
  line="$(printf '%s\n' "$since" | grep -E "^[0-9TZ:.-]+ +WARN .*: replayed [0-9]+ operations \([0-9]+ groups\) from the intent log pool=$pool\$" | tail -n 1 || true)"
  if [ -z "$line" ]; then
    echo "strata: NO INTENT-LOG REPLAY when pool $pool opened after the crash (txg ${txg:-?}; strata_commit made txg ${start:-?}): every acknowledged sync was in a committed txg already, so the crash did not test the intent log"
    return 1
  fi
  ops="$(printf '%s\n' "$line" | sed -E 's/.*: replayed ([0-9]+) operations \(([0-9]+) groups\).*/\1/')"
  groups="$(printf '%s\n' "$line" | sed -E 's/.*: replayed ([0-9]+) operations \(([0-9]+) groups\).*/\2/')"
  [ "$ops" -gt 0 ] || { echo "strata: the intent log replay after the crash applied no operation: $line"; return 1; }
  if [ -n "$start" ] && [ -n "$txg" ] && [ "$((txg - 1))" -gt "$start" ]; then
    echo "strata: WARNING: $((txg - 1 - start)) commit(s) landed between strata_commit and the crash (txg $start -> $((txg - 1))): only the syncs after the last one were replayed"
  fi
  echo "strata: intent log replayed at restart: $ops operations ($groups groups) onto txg $((${txg:-1} - 1)) of pool $pool (strata_commit: txg ${start:-?}), committed as txg ${txg:-?}"
}

strata_stop() {
  local pid; pid="$(cat "$STRATA_E2E_DIR/daemon.pid" 2>/dev/null)" || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  kill -CONT "$pid" 2>/dev/null || true # a test that failed while it was frozen
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  echo "strata daemon did not stop in 30 s after SIGTERM"; return 1
}

# Fail on ERROR lines in the daemon log (a test is not green if the daemon complained).
# One exception: fuser logs "Failed to send FUSE reply: No such file or directory" when the
# kernel has already dropped the request (the caller was killed or interrupted, as the
# crash tests do on purpose); nothing is lost by it.
strata_log_clean() {
  # The level column only: a refused request's message may quote a database's "ERROR 2002".
  if grep -E '^[0-9TZ:.-]+ +ERROR ' "$STRATA_E2E_DIR/daemon.log" | grep -v 'Failed to send FUSE reply: No such file or directory'; then
    echo "unexpected ERROR lines in $STRATA_E2E_DIR/daemon.log"; return 1
  fi
}

# A second daemon for the replication tests: its own data under $STRATA_E2E_DIR/b, a
# replication port, paired with the first (it invites site-a to write to its pool default;
# the first adds it as site-b). strata_peer runs its CLI; strata_peer_stop stops it.
strata_peer() { STRATA_SOCKET="$STRATA_E2E_DIR/b/strata.sock" "$STRATA_BIN" "$@"; }
strata_peer_start() {
  local port token
  mkdir -p "$STRATA_E2E_DIR/b"
  port="$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  STRATA_SOCKET="$STRATA_E2E_DIR/b/strata.sock" "$STRATA_BIN" serve --config /dev/null --data-dir "$STRATA_E2E_DIR/b/data" \
    --default-pool-size "${STRATA_POOL_SIZE:-8G}" --repl-port "$port" >>"$STRATA_E2E_DIR/b/daemon.log" 2>&1 &
  echo $! >"$STRATA_E2E_DIR/b/daemon.pid"
  for _ in $(seq 1 200); do strata_peer pool list >/dev/null 2>&1 && break; sleep 0.1; done
  strata_peer pool list >/dev/null || { echo "the second daemon did not start"; return 1; }
  echo "strata: pair the daemons: site-b (port $port) invites site-a to write to its pool default"
  token="$(strata_peer peer invite --name site-a --grant default 2>/dev/null)"
  "$STRATA_BIN" peer add site-b "127.0.0.1:$port" --invitation "$token" >/dev/null
}
strata_peer_stop() {
  local pid; pid="$(cat "$STRATA_E2E_DIR/b/daemon.pid" 2>/dev/null)" || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  echo "the second daemon did not stop in 30 s after SIGTERM"; return 1
}
strata_peer_log_clean() {
  if grep -E '^[0-9TZ:.-]+ +ERROR ' "$STRATA_E2E_DIR/b/daemon.log"; then
    echo "unexpected ERROR lines in $STRATA_E2E_DIR/b/daemon.log"; return 1
  fi
}

# etcd for the failover tests (Debian's etcd-server): one member on free loopback ports,
# its data and log under $STRATA_E2E_DIR; sets ETCD_URL. etcd_stop kills it.
etcd_start() {
  local c p
  command -v etcd >/dev/null || { echo "etcd is not installed: apt-get install etcd-server etcd-client"; return 1; }
  c="$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  p="$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  ETCD_URL="http://127.0.0.1:$c"
  etcd --name e2e --data-dir "$STRATA_E2E_DIR/etcd" --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
    --listen-peer-urls "http://127.0.0.1:$p" --initial-advertise-peer-urls "http://127.0.0.1:$p" \
    --initial-cluster "e2e=http://127.0.0.1:$p" >>"$STRATA_E2E_DIR/etcd.log" 2>&1 &
  echo $! >"$STRATA_E2E_DIR/etcd.pid"
  for _ in $(seq 1 200); do
    ETCDCTL_API=3 etcdctl --endpoints "$ETCD_URL" endpoint health >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "etcd did not start:"; tail -20 "$STRATA_E2E_DIR/etcd.log"; return 1
}
etcd_stop() {
  local pid; pid="$(cat "$STRATA_E2E_DIR/etcd.pid" 2>/dev/null)" || return 0
  kill "$pid" 2>/dev/null || true
}

# A fresh working directory, with nothing mounted under it.
strata_fresh() {
  strata_stop || true
  local m
  for m in $(grep -o " ${STRATA_E2E_DIR}[^ ]*" /proc/self/mountinfo 2>/dev/null || true); do umount -l "$m" || true; done
  rm -rf "$STRATA_E2E_DIR"
  mkdir -p "$STRATA_E2E_DIR"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-}" in
    crash) strata_crash ;;
    kill) strata_kill ;;
    recover) strata_recover "${2:-default}" ;;
    commit) strata_commit "${2:-default}" ;;
    *) echo "usage: strata-env.sh crash | kill | recover [POOL] | commit [POOL]"; exit 2 ;;
  esac
fi
