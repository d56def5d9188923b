#!/usr/bin/env bash
# Build the units-js tool component: build.sh OUT.wasm
# (scripts/build-js-tool.sh builds every JavaScript tool here.)
set -euo pipefail
if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUT.wasm" >&2
    exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "$here/../../scripts/build-js-tool.sh" "$here" "$1"
