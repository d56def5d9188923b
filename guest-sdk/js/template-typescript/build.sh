#!/usr/bin/env bash
# Build the {{tool}} tool: ./build.sh writes {{tool}}.wasm next to this script,
# from any working directory. The first run installs the pinned build tools
# (package.json) into node_modules with npm.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# componentize-js maps the working directory into its build sandbox and
# mangles the source path when that directory is `/`: build from here.
cd "$here"

if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    echo "error: node and npm are needed to build {{tool}}: install Node.js 20 or newer (npm comes with it), then run ./build.sh again" >&2
    exit 1
fi
if (( $(node -p 'process.versions.node.split(".")[0]') < 20 )); then
    echo "error: Node.js $(node --version) is too old to build {{tool}}: install Node.js 20 or newer" >&2
    exit 1
fi
if [[ ! -d node_modules || package.json -nt node_modules ]]; then
    npm install --no-audit --no-fund
    touch node_modules
fi

# Type-check the tool and the SDK (esbuild only strips the types).
node_modules/.bin/tsc --noEmit -p .
# componentize-js takes one ES module: bundle the tool with the SDK into it,
# leaving the WIT imports (toolhost:..., wasi:...) for componentize-js.
node_modules/.bin/esbuild tool.ts --bundle --format=esm --platform=neutral --target=es2022 \
    --external:'toolhost:*' --external:'wasi:*' --log-level=warning --outfile=build/tool.js
# fetch-event serves incoming HTTP, which a tool does not.
node_modules/.bin/componentize-js build/tool.js --wit wit --world-name toolbox \
    --disable fetch-event --out {{tool}}.wasm
echo "built $here/{{tool}}.wasm"
