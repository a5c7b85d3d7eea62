#!/usr/bin/env bash
# The whole test suite: what the README's second command and CI run.
# Installs what the tests need on a fresh Debian machine, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cc >/dev/null || need_apt+=(build-essential)
if [ ${#need_apt[@]} -gt 0 ]; then
  apt-get update -qq && apt-get install -y -qq "${need_apt[@]}"
fi

echo "== format"
cargo fmt --all -- --check

echo "== build"
cargo build --workspace --all-targets --quiet

echo "== fuzz (short run of every on-disk decoder)"
scripts/fuzz.sh "${STRATA_FUZZ_SECONDS:-20}"

echo "== raw block device (loop) end to end"
scripts/loop-smoke.sh

echo "== tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast --failure-output final
else
  cargo test --workspace --no-fail-fast
fi
