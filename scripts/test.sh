#!/usr/bin/env bash
# The test suite, from a fresh machine: install prerequisites, build every
# tool component, then run all tests (unit, golden, integration, doc).
# Tests run in release: the Python and JavaScript components take minutes to
# compile with a debug-built Cranelift, seconds with a release one.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build-tools.sh
cargo test --release --workspace "$@"
