#!/usr/bin/env bash
# Build the {{tool}} component: ./build.sh  ->  {{tool}}.wasm beside this file.
# Needs a Rust toolchain (https://rustup.rs); adds the wasm32-wasip2 target.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"

command -v cargo >/dev/null 2>&1 ||
    { echo "error: cargo not found; install Rust from https://rustup.rs" >&2; exit 1; }
if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed | grep -qx wasm32-wasip2; then
    rustup target add wasm32-wasip2
fi

cargo build --quiet --release --target wasm32-wasip2
target_dir=${CARGO_TARGET_DIR:-target}
cp "$target_dir/wasm32-wasip2/release/{{tool}}.wasm" {{tool}}.wasm
echo "built $here/{{tool}}.wasm"
