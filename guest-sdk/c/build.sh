#!/usr/bin/env bash
# Build a C tool component: build.sh OUT.wasm SOURCE.c... (this is
# guest-sdk/c/build.sh in the repository, sdk/c/build.sh in a new tool).
#
# clang compiles the sources, this SDK and the contract's bindings for
# wasm32-wasi against wasi-libc, as a reactor (a library, no main); then
# `toolhost componentize` makes the module a component of the contract in
# ../../wit (the contract the bindings were made from). On Debian and Ubuntu
# the compiler, linker and libc are installed when missing.
#
# CC, WASI_SYSROOT and TOOLHOST override the compiler, the libc and the
# toolhost used (the WASI SDK: CC=/opt/wasi-sdk/bin/clang
# WASI_SYSROOT=/opt/wasi-sdk/share/wasi-sysroot); CFLAGS adds flags.
set -euo pipefail
if [[ $# -lt 2 ]]; then
    echo "usage: $0 OUT.wasm SOURCE.c..." >&2
    exit 2
fi
out=$1
shift
sdk=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

toolhost=${TOOLHOST:-toolhost}
command -v "$toolhost" >/dev/null 2>&1 ||
    { echo "error: toolhost not found; put it on PATH or set TOOLHOST=/path/to/toolhost" >&2; exit 1; }

cc=${CC:-}
sysroot=${WASI_SYSROOT:-}
debian_rt=/usr/lib/llvm-19/lib/clang/19/lib/wasi/libclang_rt.builtins-wasm32.a
if [[ -z $cc && -z $sysroot ]] && command -v apt-get >/dev/null 2>&1 &&
    ! { command -v clang-19 && command -v wasm-ld-19 && [[ -f /usr/lib/wasm32-wasi/libc.a && -f $debian_rt ]]; } >/dev/null 2>&1; then
    packages=(clang-19 lld-19 wasi-libc libclang-rt-19-dev-wasm32)
    echo "installing ${packages[*]} (apt-get)" >&2
    sudo=""
    [[ $(id -u) -eq 0 ]] || sudo=sudo
    $sudo apt-get install -y -qq "${packages[@]}" >/dev/null ||
        { $sudo apt-get update -qq >/dev/null && $sudo apt-get install -y -qq "${packages[@]}" >/dev/null; }
fi
if [[ -z $cc ]] && command -v clang-19 >/dev/null 2>&1; then
    cc=clang-19
fi
if [[ -z $sysroot && -f /usr/lib/wasm32-wasi/libc.a ]]; then
    sysroot=/usr   # Debian's wasi-libc
fi
if [[ -z $cc || -z $sysroot ]]; then
    echo "error: need clang with wasm32 support and wasi-libc: apt-get install clang-19 lld-19 wasi-libc" >&2
    echo "       libclang-rt-19-dev-wasm32, or the WASI SDK (set CC and WASI_SYSROOT)" >&2
    exit 1
fi

core=$(mktemp --suffix=.wasm)
trap 'rm -f "$core"' EXIT
# shellcheck disable=SC2086 # CFLAGS is a list of flags
"$cc" --target=wasm32-wasi --sysroot="$sysroot" -mexec-model=reactor -Os -Wall -Wextra ${CFLAGS:-} \
    -Wl,--strip-all -I "$sdk" -o "$core" "$@" "$sdk/toolhost.c" "$sdk/bindings/toolbox.c"
"$toolhost" componentize "$core" --wit "$sdk/../../wit" -o "$out"
