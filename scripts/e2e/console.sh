#!/usr/bin/env bash
# The web console in headless Chromium (Debian's chromium + chromium-driver, driven by
# Selenium from Python: scripts/e2e/console_test.py): sign-in refused without a token and
# with a forged one, a volume created in the console and written to, its chart moving, a
# snapshot and its clone in the lineage, an NFS export, a restore's typed confirmation, a slow scrub's
# progress rising in the Jobs view, the events, sign-out; a viewer's disabled actions and a
# token revoked while signed in.
#
#   bash scripts/e2e/console.sh      (root; installs chromium, chromium-driver, python3-selenium if missing)
#
#   STRATA_ARTIFACTS        screenshots go to $STRATA_ARTIFACTS/console/ (default target/ci-artifacts)
#   CONSOLE_DOC_SCREENSHOT  where to copy the overview screenshot (docs/console.png to refresh
#                           the README's; default: not copied, so a test run leaves the tree clean)
#   CARGO_TARGET_DIR        where the strata binary is built (default target)
set -euo pipefail
cd "$(dirname "$0")/../.."
E2E_NAME=console
STEP_TIMEOUT="${STEP_TIMEOUT:-600}"
# shellcheck source=scripts/e2e/db-common.sh
. scripts/e2e/db-common.sh
STRATA_BIN="${STRATA_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/debug/strata}"
# shellcheck source=scripts/e2e/strata-env.sh
source scripts/e2e/strata-env.sh
export STRATA_E2E_DIR="${STRATA_E2E_DIR%/}-console"
ARTIFACTS="${STRATA_ARTIFACTS:-target/ci-artifacts}/console"
DOC_SCREENSHOT="${CONSOLE_DOC_SCREENSHOT:-}"
[ "$(id -u)" -eq 0 ] || die "run as root"
ensure_pkgs /usr/bin/chromium /usr/bin/chromedriver /usr/lib/python3/dist-packages/selenium -- \
  chromium chromium-driver python3-selenium

log "building strata ($STRATA_BIN)"
bounded cargo build -p strata-cli --quiet
[ -x "$STRATA_BIN" ] || die "no strata binary at $STRATA_BIN (CARGO_TARGET_DIR?)"

strata_fresh
WORK="$STRATA_E2E_DIR/work"
mkdir -p "$WORK" "$ARTIFACTS"
rm -f "$ARTIFACTS"/*.png
add_failure_log "$STRATA_E2E_DIR/daemon.log"
cleanup() {
  local rc=$?
  trap - EXIT ERR
  set +e
  if [ -f "$WORK/load.pid" ]; then kill "$(cat "$WORK/load.pid")" 2>/dev/null; fi
  [ "$rc" -eq 0 ] || print_failure_logs
  strata_stop
  exit "$rc"
}
trap cleanup EXIT

free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORT="$(free_port)"
# A scrub paced at 1 MiB/s (the least --scrub-rate) so that the browser sees it progress; NFS
# served so that the export the test makes is active.
STRATA_SERVE_ARGS="--tcp 127.0.0.1:$PORT --nfs-port $(free_port) --scrub-rate 1M" STRATA_POOL_SIZE=2G strata_start
token() { "$STRATA_BIN" --json token create "$1" --role "$2" | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["token"])'; }
TOKEN="$(token console-e2e operator)"
VIEWER_TOKEN="$(token console-viewer viewer)"
log "daemon on http://127.0.0.1:$PORT/ with an operator and a viewer token; screenshots in $ARTIFACTS/"

CONSOLE_URL="http://127.0.0.1:$PORT" STRATA_TOKEN="$TOKEN" STRATA_VIEWER_TOKEN="$VIEWER_TOKEN" STRATA_BIN="$STRATA_BIN" WORK="$WORK" \
  ARTIFACTS="$ARTIFACTS" DOC_SCREENSHOT="$DOC_SCREENSHOT" \
  bounded /usr/bin/python3 scripts/e2e/console_test.py || die "the console test failed (screenshots: $ARTIFACTS/)"

strata_log_clean
log "PASS: screenshots in $ARTIFACTS/"
