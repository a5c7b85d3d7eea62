#!/usr/bin/env bash
# A pool on a raw block device (a loop device over an image file): create, add a volume,
# check, status — the FileDevice path for block devices, with O_DIRECT.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -p strata-cli --quiet
strata="$PWD/target/debug/strata"
img="$(mktemp /tmp/strata-loop.XXXXXX)"
truncate -s 64M "$img"
dev="$(losetup --find --show "$img")" || { echo "loop-smoke: cannot attach a loop device (need root and the loop module)"; exit 1; }
trap 'losetup -d "$dev" 2>/dev/null; rm -f "$img"' EXIT
source scripts/e2e/strata-env.sh
export STRATA_E2E_DIR=/var/tmp/strata-e2e-loop STRATA_SOCKET=/var/tmp/strata-e2e-loop.sock
strata_fresh
trap 'strata_stop || true; losetup -d "$dev" 2>/dev/null; rm -f "$img"' EXIT
strata_start
"$strata" pool create loop --device "$dev"
"$strata" volume create loop/v1 --record-size 8K
status="$("$strata" pool status loop)"
grep -q "O_DIRECT" <<<"$status" || { echo "loop-smoke: expected O_DIRECT on $dev: $status"; exit 1; }
"$strata" mount loop/v1 "$STRATA_E2E_DIR/mnt"
head -c 10485760 /dev/urandom > "$STRATA_E2E_DIR/src"
cp "$STRATA_E2E_DIR/src" "$STRATA_E2E_DIR/mnt/file" && sync -f "$STRATA_E2E_DIR/mnt/file"
cmp "$STRATA_E2E_DIR/src" "$STRATA_E2E_DIR/mnt/file"
"$strata" unmount "$STRATA_E2E_DIR/mnt"
"$strata" check loop
strata_stop
"$strata" check --device "$dev"
