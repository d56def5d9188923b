#!/usr/bin/env bash
# Build the {{tool}} component: ./build.sh  ->  {{tool}}.wasm beside this file.
#
# clang compiles the tool, the SDK and the contract's bindings for wasm32-wasi
# against wasi-libc, as a reactor (a library, no main); `toolhost componentize`
# then makes the module a component of the contract in wit/. On Debian and
# Ubuntu the compiler, linker and libc are installed when missing.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"

toolhost=${TOOLHOST:-toolhost}
command -v "$toolhost" >/dev/null 2>&1 ||
    { echo "error: toolhost not found; put it on PATH or set TOOLHOST=/path/to/toolhost" >&2; exit 1; }

cc=${CC:-}
sysroot=${WASI_SYSROOT:-}
if [[ -z $cc ]]; then
    for candidate in clang-19 clang; do
        command -v "$candidate" >/dev/null 2>&1 && { cc=$candidate; break; }
    done
fi
if [[ -z $sysroot && -f /usr/lib/wasm32-wasi/libc.a ]]; then
    sysroot=/usr   # Debian's wasi-libc
fi
if [[ -z $cc || -z $sysroot ]] && command -v apt-get >/dev/null 2>&1; then
    echo "installing clang-19, lld-19, wasi-libc (apt-get)" >&2
    sudo=""
    [[ $(id -u) -eq 0 ]] || sudo=sudo
    $sudo apt-get update -qq >/dev/null || true
    $sudo apt-get install -y -qq clang-19 lld-19 wasi-libc libclang-rt-19-dev-wasm32 >/dev/null
    cc=${cc:-clang-19}
    sysroot=${sysroot:-/usr}
fi
if [[ -z $cc || -z $sysroot ]]; then
    echo "error: need clang with wasm32 support and wasi-libc: apt-get install clang-19 lld-19 wasi-libc," >&2
    echo "       or the WASI SDK (CC=/opt/wasi-sdk/bin/clang WASI_SYSROOT=/opt/wasi-sdk/share/wasi-sysroot)" >&2
    exit 1
fi

mkdir -p build
"$cc" --target=wasm32-wasi --sysroot="$sysroot" -mexec-model=reactor -Os -Wall -Wextra \
    -Wl,--strip-all -I sdk/c -o build/{{tool}}.core.wasm \
    tool.c sdk/c/toolhost.c sdk/c/bindings/toolbox.c
"$toolhost" componentize build/{{tool}}.core.wasm --wit wit -o {{tool}}.wasm
echo "built $here/{{tool}}.wasm"
