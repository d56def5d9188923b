#!/usr/bin/env bash
# Build the code tool component (run_code): build.sh OUT.wasm
#
# The program gets no network (no `fetch`), no randomness (Math.random is
# deterministic) and no clock (it stands still at build time; timers would
# trap, and seal.js replaces them with functions that say so): see
# scripts/build-js-tool.sh, which builds every JavaScript tool here.
set -euo pipefail
if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUT.wasm" >&2
    exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "$here/../../scripts/build-js-tool.sh" "$here" "$1"
