#!/usr/bin/env bash
# Build the {{tool}} component: ./build.sh  ->  {{tool}}.wasm beside this file.
# sdk/c/build.sh does the work (and says what it needs): clang for wasm32-wasi
# with wasi-libc, installed on Debian and Ubuntu when missing, then
# `toolhost componentize`: the toolhost on PATH, or TOOLHOST, or else the
# one that made this folder (named in .toolhost, which git ignores).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
if [ -z "${TOOLHOST:-}" ] && ! command -v toolhost >/dev/null 2>&1 && [ -f .toolhost ]; then
    made_by=$(head -n 1 .toolhost)
    if [ -x "$made_by" ]; then
        export TOOLHOST=$made_by
    fi
fi
sdk/c/build.sh {{tool}}.wasm tool.c
echo "built $here/{{tool}}.wasm"
