#!/usr/bin/env bash
# Build the tools and run the benchmarks; prints figures against DESIGN.md §8.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build-tools.sh
cargo bench -p toolhost --bench calls --bench agent_turn
