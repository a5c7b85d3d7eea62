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
"$strata" pool create loop --device "$dev"
"$strata" volume create --device "$dev" v1 --record-size 8K
"$strata" pool status "$dev" | grep -q "O_DIRECT" || { echo "loop-smoke: expected O_DIRECT on $dev"; exit 1; }
"$strata" check "$dev"
