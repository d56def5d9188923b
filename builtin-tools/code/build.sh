#!/usr/bin/env bash
# Build the code tool component (run_code): build.sh OUT.wasm
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUT.wasm" >&2
    exit 2
fi
out=$1
# Absolute, since the build runs from this folder.
[[ $out == /* ]] || out=$PWD/$out
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if ! command -v npm >/dev/null 2>&1; then
    echo "error: npm not found on PATH; install Node.js 20 or newer" >&2
    exit 1
fi
# componentize-js maps the working directory into the build sandbox and
# mangles the source path when that directory is `/`: build from here.
cd "$here"
if [[ ! -d node_modules || package-lock.json -nt node_modules ]]; then
    npm ci --no-audit --no-fund
    touch node_modules
fi

# componentize-js takes one ES module: esbuild bundles tool.js with the SDK
# (guest-sdk/js, TypeScript) and sucrase (the TypeScript type stripper,
# found by its package.json's `module` or `main`) into it, leaving the WIT
# imports for componentize-js.
node_modules/.bin/esbuild tool.js --bundle --format=esm --platform=neutral --main-fields=module,main --target=es2022 \
    --external:'toolhost:*' --external:'wasi:*' --log-level=warning --outfile=build/tool.js

# The engine's own WASI features are dropped: the program gets no network
# (`http` is the `fetch` global), no randomness (Math.random is
# deterministic) and no clock (it stands still at build time, and timers
# would trap: seal.js replaces them with functions that say so). `stdio`
# stays so an uncaught exception prints its stack to stderr before the
# instance traps, instead of trapping silently.
node_modules/.bin/componentize-js build/tool.js \
    --wit ../../wit --world-name toolbox \
    --disable random clocks http fetch-event \
    --out "$out"
