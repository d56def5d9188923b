#!/usr/bin/env bash
# Build every example tool, the built-in code tool (builtin-tools/code), the
# test probe and the MCP conformance fixtures into target/tools/NAME.wasm.
#
#   scripts/build-tools.sh          # Rust, Python, JavaScript and C tools
#   scripts/build-tools.sh --rust   # Rust tools, the probe and the fixtures only
#   scripts/build-tools.sh --demo   # the quickstart's two tools only (calc, http-get)
#   scripts/build-tools.sh --code   # the code tool and what example-tools/code.toml grants it
#
# Needs the wasm32-wasip2 target; Python and JavaScript tools also need
# componentize-py and Node.js, and C tools clang-19, wasi-libc and the
# toolhost binary, built here (scripts/setup.sh installs all of it).
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/tools
mkdir -p "$out"

if [ "${1:-}" = "--demo" ]; then
    cargo build --quiet --target wasm32-wasip2 --profile guest -p calc -p http-get
    cp target/wasm32-wasip2/guest/calc.wasm "$out/calc.wasm"
    cp target/wasm32-wasip2/guest/http_get.wasm "$out/http-get.wasm"
    echo "built calc http-get -> $out/"
    exit 0
fi
if [ "${1:-}" = "--code" ]; then
    cargo build --quiet --target wasm32-wasip2 --profile guest -p calc
    cp target/wasm32-wasip2/guest/calc.wasm "$out/calc.wasm"
    for dir in example-tools/units-js example-tools/text-py builtin-tools/code; do
        "$dir/build.sh" "$out/$(basename "$dir").wasm"
        echo "built $(basename "$dir") -> $out/$(basename "$dir").wasm"
    done
    exit 0
fi

rust_tools=(calc http-get files notes qr probe probe-v0_1 probe-v0_2_0 probe-caller mcp-fixtures)
cargo build --quiet --target wasm32-wasip2 --profile guest $(printf -- '-p %s ' "${rust_tools[@]}")
for tool in "${rust_tools[@]}"; do
    cp "target/wasm32-wasip2/guest/${tool//-/_}.wasm" "$out/$tool.wasm"
done
# The probe again, listing one tool name twice: a load error, never a panic.
cargo build --quiet --target wasm32-wasip2 --profile guest -p probe --features duplicate-names
cp target/wasm32-wasip2/guest/probe.wasm "$out/probe-dup.wasm"
# And trapping in tools(): it compiles, links, and is refused at load.
cargo build --quiet --target wasm32-wasip2 --profile guest -p probe --features trap-in-tools
cp target/wasm32-wasip2/guest/probe.wasm "$out/probe-trap.wasm"
cargo build --quiet --target wasm32-wasip2 --profile guest -p probe
cp target/wasm32-wasip2/guest/probe.wasm "$out/probe.wasm"
# The conformance fixture that requires the client's sampling capability,
# alone in a component of its own (its manifest entry says so).
cargo build --quiet --target wasm32-wasip2 --profile guest -p mcp-fixtures --features needs-sampling
cp target/wasm32-wasip2/guest/mcp_fixtures.wasm "$out/mcp-fixtures-sampling.wasm"
cargo build --quiet --target wasm32-wasip2 --profile guest -p mcp-fixtures --features trigger
cp target/wasm32-wasip2/guest/mcp_fixtures.wasm "$out/mcp-fixtures-trigger.wasm"
cargo build --quiet --target wasm32-wasip2 --profile guest -p mcp-fixtures
cp target/wasm32-wasip2/guest/mcp_fixtures.wasm "$out/mcp-fixtures.wasm"
echo "built ${rust_tools[*]} probe-dup probe-trap mcp-fixtures-sampling mcp-fixtures-trigger -> $out/"

[ "${1:-}" = "--rust" ] && exit 0

# The C tool is made a component by `toolhost componentize`. Built with the
# features `cargo test --workspace` uses, so the tests reuse it.
cargo build --release --quiet --workspace --bin toolhost

# The C SDK's probe, for the host's tests: built as every C tool is.
TOOLHOST=target/release/toolhost CFLAGS="-Werror" guest-sdk/c/build.sh "$out/probe-c.wasm" tests/probe-c/probe.c
# A C tool whose constructor logs while its instance is made.
TOOLHOST=target/release/toolhost CFLAGS="-Werror" guest-sdk/c/build.sh "$out/probe-c-early.wasm" tests/probe-c/early.c
echo "built probe-c probe-c-early -> $out/"

for dir in example-tools/text-py example-tools/units-js example-tools/base64-c builtin-tools/code; do
    name=$(basename "$dir")
    # Rebuild only when a source file is newer than the component: the
    # Python and JavaScript toolchains take several seconds each.
    sdk=guest-sdk/${name##*-}
    [ "$sdk" = guest-sdk/py ] && sdk=guest-sdk/python
    # The code tool is JavaScript, written with the JavaScript SDK.
    [ "$dir" = builtin-tools/code ] && sdk=guest-sdk/js
    # A C tool also depends on the toolhost that componentized it (the WASI adapter).
    inputs=("$dir" wit "$sdk")
    [ "$sdk" = guest-sdk/c ] && inputs+=(target/release/toolhost)
    # The scaffold templates beside the SDK are not part of the tool.
    if [ -f "$out/$name.wasm" ] && [ -z "$(find "${inputs[@]}" -newer "$out/$name.wasm" -type f \
        -not -path '*/node_modules/*' -not -path "$sdk/template*" | head -1)" ]; then
        echo "$name is up to date"
        continue
    fi
    "$dir/build.sh" "$out/$name.wasm"
    echo "built $name -> $out/$name.wasm"
done
