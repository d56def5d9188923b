#!/usr/bin/env bash
# Build the text-py tool component: build.sh OUT.wasm
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUT.wasm" >&2
    exit 2
fi
out=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if ! command -v componentize-py >/dev/null 2>&1; then
    echo "error: componentize-py not found on PATH; install it with: pip install componentize-py==0.25.1" >&2
    exit 1
fi

version=$(componentize-py --version | awk '{print $2}')
if [[ $version != 0.25.1 ]]; then
    # Other versions may name the generated binding modules differently.
    echo "warning: built and tested with componentize-py 0.25.1, found $version" >&2
fi

# componentize-py generates the bindings (wit_world, componentize_py_types)
# on the fly, so nothing generated is kept next to the source. The `-p`s
# point at this folder and at a copy of the SDK (the `toolhost` package) so
# the build works from any working directory. A copy: componentize-py's
# interpreter writes __pycache__ beside what it imports, whatever
# PYTHONDONTWRITEBYTECODE says, and a new folder in guest-sdk/ (which the
# toolhost binary embeds, host/build.rs) would make cargo rebuild toolhost.
sdk=$(mktemp -d)
trap 'rm -rf "$sdk"' EXIT
cp -R "$here/../../guest-sdk/python/toolhost" "$sdk/"
componentize-py -d "$here/../../wit" -w toolbox componentize \
    -p "$here" -p "$sdk" app -o "$out"
