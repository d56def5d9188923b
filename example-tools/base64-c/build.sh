#!/usr/bin/env bash
# Build the base64-c tool component: build.sh OUT.wasm
# With the C SDK's build (guest-sdk/c/build.sh), warnings as errors, and the
# repository's toolhost (TOOLHOST, default target/release/toolhost).
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUT.wasm" >&2
    exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
TOOLHOST=${TOOLHOST:-$repo/target/release/toolhost} CFLAGS="-Werror" \
    "$repo/guest-sdk/c/build.sh" "$1" "$here/tool.c"
