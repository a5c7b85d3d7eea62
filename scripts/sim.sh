#!/usr/bin/env bash
# The deterministic simulator (crates/sim, docs/simulator.md): builds with
# RUSTFLAGS="--cfg strata_sim" (the engine's locks, atomics and threads become a seeded
# scheduler's) into its own target directory, then runs it. The mode comes from the
# environment:
#   scripts/sim.sh                              the short run (STRATA_SIM_SEEDS seeds, default 160)
#   STRATA_SIM_SEED=N scripts/sim.sh            replay seed N (a failure prints this line)
#   STRATA_SIM_SECONDS=3600 scripts/sim.sh      soak: consecutive seeds for an hour
#                                               (from STRATA_SIM_BASE, else from the time)
#   STRATA_SIM_TRACE=1                          print the admin thread's operations
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="--cfg strata_sim"
export CARGO_TARGET_DIR="${STRATA_SIM_TARGET_DIR:-$PWD/target/sim}"
# Seeds run one after another in one test: its output is the report.
cargo test -p strata-sim --test sim --quiet -- --nocapture --test-threads=1
