#!/usr/bin/env bash
# The POSIX behaviour suite (tests/posix) through a real FUSE mount of a Strata volume.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/e2e/strata-env.sh
python3 -m pytest --version >/dev/null 2>&1 || pip install --quiet pytest
strata_fresh
trap 'strata_stop || true' EXIT
strata_start
mnt="$STRATA_E2E_DIR/posix"
strata_mount posix "$mnt" --size 4G
STRATA_MOUNT="$mnt" python3 -m pytest -q -p no:cacheprovider tests/posix
"$STRATA_BIN" unmount "$mnt"
"$STRATA_BIN" check default
strata_log_clean
