#!/usr/bin/env bash
# Start, crash and stop a Strata daemon for the end-to-end tests.
#
# Source it for the functions, or run it:  strata-env.sh crash   (what CRASH_CMD runs)
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
  local i
  for i in $(seq 1 200); do
    if "$STRATA_BIN" pool list >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$(cat "$STRATA_E2E_DIR/daemon.pid")" 2>/dev/null; then
      echo "strata daemon died at start:"; tail -20 "$STRATA_E2E_DIR/daemon.log"; return 1
    fi
    sleep 0.1
  done
  echo "strata daemon did not come up in 20 s"; tail -20 "$STRATA_E2E_DIR/daemon.log"; return 1
}

# strata_mount VOLUME DIR [volume create args...]: create (if needed) and mount default/VOLUME.
strata_mount() {
  local vol="$1" dir="$2"; shift 2
  "$STRATA_BIN" volume show "default/$vol" >/dev/null 2>&1 || "$STRATA_BIN" volume create "default/$vol" "$@"
  "$STRATA_BIN" mount "default/$vol" "$dir"
}

# The crash a database must survive: kill -9 the daemon (its mounts go ENOTCONN), start it
# again; it reopens the pool at its last committed txg and remounts where it was.
strata_crash() {
  local pid; pid="$(cat "$STRATA_E2E_DIR/daemon.pid")"
  kill -9 "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  echo "strata: daemon $pid killed with SIGKILL; restarting" >>"$STRATA_E2E_DIR/daemon.log"
  strata_start
}

strata_stop() {
  local pid; pid="$(cat "$STRATA_E2E_DIR/daemon.pid" 2>/dev/null)" || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  local i
  for i in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
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

# A fresh working directory, with nothing mounted under it.
strata_fresh() {
  strata_stop || true
  local m
  for m in $(grep -o " $STRATA_E2E_DIR[^ ]*" /proc/self/mountinfo 2>/dev/null || true); do umount -l "$m" || true; done
  rm -rf "$STRATA_E2E_DIR"
  mkdir -p "$STRATA_E2E_DIR"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-}" in
    crash) strata_crash ;;
    *) echo "usage: strata-env.sh crash"; exit 2 ;;
  esac
fi
