#!/usr/bin/env bash
# Build a JavaScript tool component of this repository (the code tool,
# example-tools/units-js): build-js-tool.sh FOLDER OUT.wasm
#
# FOLDER holds tool.js and a package.json with componentize-js and esbuild.
# (Tools made by `toolhost new` have their own build.sh; this one is for
# tools inside the repository, whose SDK and WIT are ../../guest-sdk/js
# and ../../wit.)
set -euo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: $0 FOLDER OUT.wasm" >&2
    exit 2
fi
folder=$1
out=$2
# Absolute, since the build runs from the tool's folder.
[[ $out == /* ]] || out=$PWD/$out

if ! command -v npm >/dev/null 2>&1; then
    echo "error: npm not found on PATH; install Node.js 20 or newer" >&2
    exit 1
fi
# componentize-js maps the working directory into the build sandbox and
# mangles the source path when that directory is `/`: build from the tool's
# folder.
cd "$folder"
if [[ ! -d node_modules || package-lock.json -nt node_modules ]]; then
    npm ci --no-audit --no-fund
    touch node_modules
fi

# componentize-js takes one ES module: esbuild bundles tool.js with the SDK
# (guest-sdk/js, TypeScript) and the tool's own packages (found by their
# package.json's `module` or `main`) into it, leaving the WIT imports for
# componentize-js.
node_modules/.bin/esbuild tool.js --bundle --format=esm --platform=neutral --main-fields=module,main --target=es2022 \
    --external:'toolhost:*' --external:'wasi:*' --log-level=warning --outfile=build/tool.js

# The engine's own WASI features are dropped: `http` is only the `fetch`
# global (the world's wasi:http import stays, and the SDK's http helper uses
# it), without `random` Math.random is deterministic, and without `clocks`
# the clock stands still at build time and timers are unavailable. `stdio`
# stays so an uncaught exception prints its stack to stderr before the
# instance traps, instead of trapping silently.
node_modules/.bin/componentize-js build/tool.js \
    --wit ../../wit --world-name toolbox \
    --disable random clocks http fetch-event \
    --out "$out"
