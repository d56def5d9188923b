#!/usr/bin/env bash
# Build the {{tool}} component: ./build.sh  ->  {{tool}}.wasm beside this file.
# sdk/c/build.sh does the work (and says what it needs): clang for wasm32-wasi
# with wasi-libc, installed on Debian and Ubuntu when missing, then
# `toolhost componentize`, which needs toolhost on PATH (or TOOLHOST).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
sdk/c/build.sh {{tool}}.wasm tool.c
echo "built $here/{{tool}}.wasm"
