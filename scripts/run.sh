#!/usr/bin/env bash
# Strata's main job on an embedded default: build, make a pool in a local image file,
# create a volume in it, verify it, and say where to look next.
set -euo pipefail
cd "$(dirname "$0")/.."
data_dir="${STRATA_DATA_DIR:-/var/lib/strata}"
image="$data_dir/demo.img"

command -v cc >/dev/null || { apt-get update -qq && apt-get install -y -qq build-essential; }
cargo build --release -p strata-cli --quiet
strata="$PWD/target/release/strata"
mkdir -p "$data_dir"

if ! "$strata" pool status "$image" >/dev/null 2>&1; then
  "$strata" pool create demo --device "$image" --size 1G
fi
"$strata" volume list --device "$image" | grep -q '^pg ' || "$strata" volume create --device "$image" pg --size 100G
echo
"$strata" pool status "$image"
echo
"$strata" volume list --device "$image"
echo
"$strata" check "$image"
cat <<MSG

The pool lives in $image.
Try:
  $strata volume create --device $image mysql --record-size 16K
  $strata check $image --json
  target/release/engine-bench --ops 2000     (cargo build --release -p strata-bench first)
Design notes: docs/engine-format.md; benchmark results: docs/benchmarks/.
MSG
