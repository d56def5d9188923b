#!/usr/bin/env bash
# Build the base64-c tool component: build.sh OUT.wasm
# Needs clang-19, lld-19 and wasi-libc (scripts/setup.sh installs them) and a
# built toolhost (TOOLHOST, default target/release/toolhost) for componentize.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUT.wasm" >&2
    exit 2
fi
out=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
toolhost=${TOOLHOST:-$repo/target/release/toolhost}
sdk=$repo/sdk/c
core=$(mktemp --suffix=.wasm)
trap 'rm -f "$core"' EXIT

clang-19 --target=wasm32-wasi --sysroot=/usr -mexec-model=reactor -Os -Wall -Wextra -Werror \
    -Wl,--strip-all -I "$sdk" -o "$core" \
    "$here/tool.c" "$sdk/toolhost.c" "$sdk/bindings/toolbox.c"
"$toolhost" componentize "$core" -o "$out"
