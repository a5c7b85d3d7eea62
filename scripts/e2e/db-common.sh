# shellcheck shell=bash
# shellcheck disable=SC2034 # WAIT_BG_RC, ACKED_* are results read by the sourcing scripts
# Shared helpers for the end-to-end database crash tests (postgres-crash.sh, mariadb-crash.sh).
# Sourced, not executed. The sourcing script sets E2E_NAME (used in messages) before sourcing
# and has `set -euo pipefail` on.
#
# Contract common to both scripts (see each script's header for its own knobs):
#   DB_DIR     existing directory on the storage under test (required); the database's data
#              directory and its WAL / redo logs go inside it.
#
# The crash is a power failure that hits the storage first, while the database is committing
# (power_failure below): 1. the storage process (STORAGE_PID_FILE) is frozen with SIGSTOP,
# so nothing the database does from that instant reaches it; 2. every database process is
# kill -9'd (one blocked in a request to the frozen storage dies when the storage does);
# 3. CRASH_CMD must kill the storage process: if it is still alive afterwards the run FAILS;
# 4. once the database and its load are gone, RESTART_CMD brings the storage back, and may
# check its own recovery (a non-zero exit FAILS the run). So the commits acknowledged just
# before the crash are only as durable as the storage's synchronous path (for Strata: the
# intent log, whose replay `strata-env.sh recover` requires). There is no default for any
# of the three: a run that crashes nothing proves nothing.
#   STORAGE_PID_FILE  file holding the pid of the storage process (required; read at the crash)
#   CRASH_CMD  shell command (`bash -c`) that kills the storage process (required), e.g.
#              "scripts/e2e/strata-env.sh kill". Bounded by CRASH_TIMEOUT seconds.
#   RESTART_CMD  shell command that brings the storage back after the crash (required), e.g.
#              "scripts/e2e/strata-env.sh recover". Bounded by CRASH_TIMEOUT seconds.
#   PRE_CRASH_CMD  optional shell command run under load PRE_CRASH_LEAD seconds (default 3)
#              before the crash, which then comes at least 1 s after it returned, e.g.
#              "scripts/e2e/strata-env.sh commit": everything before is committed, the commits
#              acknowledged after it are in the intent log only. Bounded by CRASH_TIMEOUT.
#   E2E_SELFTEST_LATE_CRASH=N  negative self-test: the old, wrong order — the database is
#              killed first and the storage only N seconds later, after the load stopped. With
#              a storage that commits within N seconds (Strata: --txg-interval below N) nothing
#              is left for the intent log, and RESTART_CMD (the replay check) must FAIL.
#   STEP_TIMEOUT  seconds any single step may take before the script fails (default 600).
#   E2E_KEEP_WORK=1  keep the private work dir (logs, sockets, client-side ack logs) on success
#              (it is always kept on failure).

: "${E2E_NAME:=e2e}"
# Byte-order sorting for sort/comm and a locale every tool here knows.
export LC_ALL=C

# Upper bound for any single foreground step (a query, a check, a benchmark run, a clean stop):
# storage that hangs makes the script fail, never hang.
: "${STEP_TIMEOUT:=600}"
bounded() { timeout -k 10 "$STEP_TIMEOUT" "$@"; }

e2e_ts() { date +%H:%M:%S; }
log() { printf '[%s %s] %s\n' "$(e2e_ts)" "$E2E_NAME" "$*"; }
warn() { printf '[%s %s] WARNING: %s\n' "$(e2e_ts)" "$E2E_NAME" "$*" >&2; }

# Files whose tails are printed when the script fails (add with add_failure_log).
E2E_FAILURE_LOGS=()
add_failure_log() { E2E_FAILURE_LOGS+=("$1"); }

die() {
  printf '\n[%s %s] FAIL: %s\n' "$(e2e_ts)" "$E2E_NAME" "$*" >&2
  exit 1
}

# A command that fails outside an explicit check ends the script through `set -e`: say which.
# Only in the main shell: background jobs (a benchmark that the crash makes fail) and command
# substitutions report through their callers.
e2e_on_err() {
  [ "$BASHPID" = "$$" ] || return 0
  printf '\n[%s %s] FAIL: command failed (exit %s) at line %s: %s\n' \
    "$(e2e_ts)" "$E2E_NAME" "$1" "$2" "$3" >&2
}
set -E # the ERR trap also fires inside functions
trap 'e2e_on_err $? $LINENO "$BASH_COMMAND"' ERR

print_failure_logs() {
  local f
  for f in "${E2E_FAILURE_LOGS[@]}"; do
    [ -f "$f" ] || continue
    printf '\n----- tail -n 60 %s -----\n' "$f" >&2
    tail -n 60 "$f" >&2 || true
  done
  printf -- '----- end of logs -----\n' >&2
}

# nap SECONDS: sleep that lets a trapped INT/TERM end the script at once (bash runs traps only
# between foreground commands, and `wait` is interruptible where `sleep` is not).
NAP_PID=""
nap() {
  sleep "$1" &
  NAP_PID=$!
  wait "$NAP_PID" || true
  NAP_PID=""
}
# kill_nap: for the EXIT trap, so an interrupted nap leaves no stray sleep behind.
kill_nap() { if [ -n "$NAP_PID" ]; then kill "$NAP_PID" 2>/dev/null || true; fi; }

# now_s: seconds since the epoch, with sub-second part (for durations).
now_s() { date +%s.%N; }
elapsed_since() { awk -v a="$1" -v b="$(now_s)" 'BEGIN { printf "%.1f", b - a }'; }

# wait_for DESC TIMEOUT_SECONDS CMD...: poll CMD every 0.5 s until it succeeds; die after TIMEOUT.
wait_for() {
  local desc="$1" timeout_s="$2"
  shift 2
  local deadline=$((SECONDS + timeout_s))
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      die "timed out after ${timeout_s}s waiting for: $desc"
    fi
    sleep 0.5
  done
}

# is_alive PID: PID exists and is not a zombie.
is_alive() {
  kill -0 "$1" 2>/dev/null && [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" != Z ]
}

# wait_pid_gone PID TIMEOUT: wait until PID no longer exists at all, since a database refuses to
# start while the pid in its lock file answers kill(pid, 0), which a zombie does. A zombie child
# of this shell is reaped with `wait`; any other zombie is waited for until its parent reaps it.
# Returns 1 on timeout.
wait_pid_gone() {
  local pid="$1" timeout_s="$2" deadline=$((SECONDS + $2))
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$(ps -o stat= -p "$pid" 2>/dev/null | cut -c1)" = "Z" ] &&
      [ "$(ps -o ppid= -p "$pid" 2>/dev/null | tr -d ' ')" = "$$" ]; then
      wait "$pid" 2>/dev/null || true
      continue
    fi
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.2
  done
  return 0
}

# wait_bg PID TIMEOUT: wait for a background child of this shell, at most TIMEOUT seconds.
# Sets WAIT_BG_RC to its exit status (124 if it had to be killed).
wait_bg() {
  local pid="$1" timeout_s="$2" deadline=$((SECONDS + $2))
  WAIT_BG_RC=0
  while is_alive "$pid"; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      warn "background process $pid still running after ${timeout_s}s; killing it"
      kill -TERM "$pid" 2>/dev/null || true
      sleep 2
      kill -KILL "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
      WAIT_BG_RC=124
      return 0
    fi
    sleep 0.2
  done
  wait "$pid" 2>/dev/null || WAIT_BG_RC=$?
  return 0
}

# ensure_pkgs CHECK_PATH... -- PKG...: install PKGs with apt if any CHECK_PATH is missing.
# Idempotent; runs apt-get update at most once per script run.
E2E_APT_UPDATED=0
ensure_pkgs() {
  local missing=0 p
  while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
    [ -e "$1" ] || missing=1
    shift
  done
  [ "${1:-}" = "--" ] && shift
  [ "$missing" -eq 0 ] && return 0
  log "installing packages: $*"
  export DEBIAN_FRONTEND=noninteractive
  if [ "$E2E_APT_UPDATED" -eq 0 ]; then
    timeout 600 apt-get update -qq || die "apt-get update failed"
    E2E_APT_UPDATED=1
  fi
  timeout 900 apt-get install -y -qq "$@" >/dev/null || die "apt-get install $* failed"
  for p in "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || die "package $p did not install"
  done
}

# require_db_dir: validate DB_DIR and make it traversable by USER (the database server user).
require_db_dir() {
  local user="$1"
  [ -n "${DB_DIR:-}" ] || die "DB_DIR is not set (an existing directory on the storage under test)"
  [ -d "$DB_DIR" ] || die "DB_DIR=$DB_DIR is not a directory"
  DB_DIR="$(cd "$DB_DIR" && pwd -P)"
  if ! runuser -u "$user" -- test -x "$DB_DIR"; then
    log "making DB_DIR traversable for user $user (chmod o+x $DB_DIR)"
    chmod o+x "$DB_DIR" || true
    runuser -u "$user" -- test -x "$DB_DIR" ||
      die "user $user cannot reach DB_DIR=$DB_DIR (check the parent directories' permissions; a FUSE mount needs allow_other)"
  fi
}

# port_in_use PORT: true if something accepts TCP connections on 127.0.0.1:PORT.
port_in_use() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# require_crash_setup: refuse to run without a real crash (see the contract above): checked
# before anything is installed or started.
: "${E2E_SELFTEST_LATE_CRASH:=0}"
require_crash_setup() {
  [ -n "${CRASH_CMD:-}" ] ||
    die "CRASH_CMD is not set: a command that kills the storage process (e.g. scripts/e2e/strata-env.sh kill); there is no default"
  [ -n "${RESTART_CMD:-}" ] ||
    die "RESTART_CMD is not set: a command that brings the storage back after the crash (e.g. scripts/e2e/strata-env.sh recover); there is no default"
  [ -n "${STORAGE_PID_FILE:-}" ] ||
    die "STORAGE_PID_FILE is not set: the file holding the pid of the storage process the crash must kill"
  storage_pid
}

# storage_pid: set STORAGE_PID to the pid in STORAGE_PID_FILE, which must be a live process.
storage_pid() {
  STORAGE_PID="$(head -n 1 "$STORAGE_PID_FILE" 2>/dev/null | tr -d ' ')" || true
  [[ "$STORAGE_PID" =~ ^[0-9]+$ ]] || die "STORAGE_PID_FILE=$STORAGE_PID_FILE holds no pid"
  is_alive "$STORAGE_PID" ||
    die "the storage process $STORAGE_PID (STORAGE_PID_FILE=$STORAGE_PID_FILE) is not running"
}

# run_hook NAME: run the shell command in variable NAME (bounded by CRASH_TIMEOUT), its output
# in the log and in $WORK/NAME.out; FAIL if it fails.
run_hook() {
  local name="$1" t0 rc=0
  local cmd="${!name}"
  t0="$(now_s)"
  log "running $name: $cmd"
  timeout "${CRASH_TIMEOUT}" bash -c "$cmd" >"$WORK/$name.out" 2>&1 || rc=$?
  sed 's/^/    /' "$WORK/$name.out"
  [ "$rc" -eq 0 ] || die "$name failed (exit $rc; 124 = timed out after ${CRASH_TIMEOUT}s): $cmd"
  log "$name done in $(elapsed_since "$t0")s"
}

# crash_wait SECONDS: wait until SECONDS into the load (the crash point); PRE_CRASH_CMD, if
# set, runs PRE_CRASH_LEAD seconds before it, and the crash point moves if needed so that it
# comes at least 1 s after PRE_CRASH_CMD returned (a slow commit must not leave the storage
# no time to log acknowledged commits on top of it).
: "${PRE_CRASH_LEAD:=3}"
crash_wait() {
  local after="$1" t0 rest
  t0="$(now_s)"
  if [ -z "${PRE_CRASH_CMD:-}" ]; then
    nap "$after"
    return 0
  fi
  [ "$PRE_CRASH_LEAD" -lt "$after" ] || die "PRE_CRASH_LEAD ($PRE_CRASH_LEAD) must be less than the crash point ($after s)"
  nap "$((after - PRE_CRASH_LEAD))"
  run_hook PRE_CRASH_CMD
  rest="$(awk -v a="$t0" -v b="$(now_s)" -v s="$after" 'BEGIN { r = s - (b - a); printf "%.1f", (r < 1 ? 1 : r) }')"
  nap "$rest"
}

# A storage process this script froze and has not seen die: thawed (SIGCONT) on the way out,
# so that a failed run leaves nothing hanging (cleanup calls thaw_storage first).
STORAGE_FROZEN=""
thaw_storage() {
  if [ -n "$STORAGE_FROZEN" ]; then
    kill -CONT "$STORAGE_FROZEN" 2>/dev/null || true
    STORAGE_FROZEN=""
  fi
}

# power_failure: the crash, storage first (see the contract above), while the load runs. The
# sourcing script provides db_kill (SIGSTOP + SIGKILL of every database process, without
# waiting: one blocked in a request to the frozen storage dies only when the storage does)
# and db_reap (wait until they are all gone). Sets CRASH_T (when the storage froze) and
# CRASH_SECS (how long CRASH_CMD took).
power_failure() {
  local spid t0
  storage_pid
  spid="$STORAGE_PID"
  if [ "$E2E_SELFTEST_LATE_CRASH" -gt 0 ]; then
    warn "SELFTEST: the database is killed first and the storage ${E2E_SELFTEST_LATE_CRASH}s later; the intent-log replay check must FAIL"
    db_kill
    db_reap
    nap "$E2E_SELFTEST_LATE_CRASH"
  fi
  kill -STOP "$spid" || die "cannot freeze the storage process $spid"
  STORAGE_FROZEN="$spid"
  CRASH_T="$(now_s)"
  log "power failure: storage process $spid frozen (SIGSTOP); nothing more reaches the storage"
  [ "$E2E_SELFTEST_LATE_CRASH" -gt 0 ] || db_kill
  t0="$(now_s)"
  log "running CRASH_CMD: $CRASH_CMD"
  local rc=0
  timeout "${CRASH_TIMEOUT}" bash -c "$CRASH_CMD" || rc=$?
  CRASH_SECS="$(elapsed_since "$t0")"
  # (A CRASH_CMD may return as soon as it sent its signal: the process gets 10 s to be gone.)
  local i=0
  while is_alive "$spid" && [ "$i" -lt 50 ]; do
    sleep 0.2
    i=$((i + 1))
  done
  if is_alive "$spid"; then
    thaw_storage
    die "CRASH_CMD (exit $rc) did not crash the storage: its process $spid is still alive: $CRASH_CMD"
  fi
  STORAGE_FROZEN=""
  [ "$rc" -eq 0 ] || die "CRASH_CMD failed (exit $rc; 124 = timed out after ${CRASH_TIMEOUT}s): $CRASH_CMD"
  log "CRASH_CMD done in ${CRASH_SECS}s: storage process $spid is gone"
  [ "$E2E_SELFTEST_LATE_CRASH" -gt 0 ] || db_reap
}

# verify_acked EXPECTED ACTUAL: both files hold lines "CLIENT SEQ" (whitespace-separated).
# EXPECTED = transactions the client saw COMMIT succeed for; ACTUAL = rows found in the database
# after recovery. Every expected row must be present. A row that is present but not expected is
# allowed only if it is the single in-flight transaction of its client at crash time: at most one
# such row per client, with a SEQ above every acknowledged SEQ of that client (its COMMIT may have
# become durable without the acknowledgement reaching the client). Anything else is a failure.
# Sets ACKED_VERIFIED (number of acknowledged rows checked) and ACKED_INFLIGHT (extra rows seen).
verify_acked() {
  local expected="$1" actual="$2" dir
  dir="$(dirname "$expected")"
  awk '{ print $1 " " $2 }' "$expected" | sort -u >"$dir/acked.expected.sorted"
  awk '{ print $1 " " $2 }' "$actual" | sort -u >"$dir/acked.actual.sorted"
  local n_exp n_act n_dup_exp
  n_exp=$(wc -l <"$dir/acked.expected.sorted")
  n_act=$(wc -l <"$dir/acked.actual.sorted")
  n_dup_exp=$(($(wc -l <"$expected") - n_exp))
  [ "$n_dup_exp" -eq 0 ] || die "client-side ack log has $n_dup_exp duplicate entries (test bug)"
  [ "$n_exp" -gt 0 ] || die "no transaction was acknowledged before the crash (load did not run?)"

  comm -23 "$dir/acked.expected.sorted" "$dir/acked.actual.sorted" >"$dir/acked.missing"
  comm -13 "$dir/acked.expected.sorted" "$dir/acked.actual.sorted" >"$dir/acked.extra"
  local n_missing n_extra
  n_missing=$(wc -l <"$dir/acked.missing")
  n_extra=$(wc -l <"$dir/acked.extra")
  if [ "$n_missing" -gt 0 ]; then
    printf 'first missing acknowledged transactions (client seq):\n' >&2
    head -n 20 "$dir/acked.missing" >&2
    die "LOST COMMITS: $n_missing of $n_exp acknowledged transactions are missing after crash recovery"
  fi
  # Extra rows: at most one per client and above that client's highest acknowledged seq.
  local bad
  bad=$(awk 'NR == FNR { if (!($1 in max) || $2 > max[$1]) max[$1] = $2; next }
             { n[$1]++; if (n[$1] > 1 || (($1 in max) && $2 <= max[$1])) print }' \
    "$dir/acked.expected.sorted" "$dir/acked.extra")
  if [ -n "$bad" ]; then
    printf '%s\n' "$bad" | head -n 20 >&2
    die "rows present that no client could have committed (more than one in-flight transaction per client, or below its acknowledged seq): see $dir/acked.extra"
  fi
  ACKED_VERIFIED=$n_exp
  ACKED_INFLIGHT=$n_extra
  log "acknowledged transactions verified: $n_exp present, 0 missing; $n_extra in-flight commit(s) also became durable ($n_act rows in table)"
}
