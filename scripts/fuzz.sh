#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer via cargo-fuzz) of the on-disk decoders, of damaged
# pool images and of the iSCSI PDU, login and CDB decoders, for SECONDS per target
# (default 20; CI runs the short default).
# cargo-fuzz needs nightly-only compiler flags: RUSTC_BOOTSTRAP lets the stable toolchain
# accept them. Findings land in fuzz/artifacts/<target>/ and fail this script.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-20}"
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  cargo install cargo-fuzz --locked --quiet
fi
export RUSTC_BOOTSTRAP=1
for target in decode_all pool_image corrupt_rechecksum iscsi_pdus nbd_requests; do
  echo "-- fuzz $target for ${secs}s"
  cargo fuzz build -O "$target" 2>&1 | grep -v -E '^\s*(Compiling|Finished)' || true
  cargo fuzz run -O "$target" -- -max_total_time="$secs" -len_control=0 -max_len=1024 \
      -rss_limit_mb=4096 -print_final_stats=1 2>&1 | grep -E '^(Done|stat::number_of_executed_units|==|SUMMARY|.*panicked)' || true
  if compgen -G "fuzz/artifacts/$target/crash-*" >/dev/null; then
    echo "fuzz target $target found a crash: see fuzz/artifacts/$target/ (replay: cargo fuzz run $target <file>)"
    exit 1
  fi
done
