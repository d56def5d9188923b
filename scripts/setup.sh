#!/usr/bin/env bash
# Install what building the tools needs, on a fresh machine. Idempotent:
# each step is skipped when already done.
#   - the wasm32-wasip2 Rust target (Rust tools)
#   - componentize-py (Python tools), pinned
#   - componentize-js and jco, from example-tools/units-js/package-lock.json
#   - redis-server (Debian's package), for the tests of shared stores
#   - with --demo: the wasm32-wasip2 target alone (the quickstart's demo);
#     with --code: and componentize-py and componentize-js (code mode's example)
#   - with --tests only: haproxy (Debian's package), for the cluster test
#     (scripts/cluster-test.sh); docker-registry (Debian's package, distribution 2.8)
#     and wkg (crates.io, compiled unoptimised: about 3 minutes once), for the tests of
#     registry components; the independent signature verifiers of
#     tests/verifiers (sigstore-js from npm, pinned by its package-lock.json;
#     sigstore-rs's cosign module, built unoptimised from its Cargo.lock
#     into target/verifiers, about 2 minutes once), which check what
#     `toolhost sign` writes; the quickstart needs none of these
# (C tools' compiler and libc are installed by guest-sdk/c/build.sh, which builds them.)
set -euo pipefail
cd "$(dirname "$0")/.."

COMPONENTIZE_PY=0.25.1
WKG=0.16.1

if ! rustup target list --installed | grep -qx wasm32-wasip2; then
    echo "setup: adding the wasm32-wasip2 target"
    rustup target add wasm32-wasip2
fi

# The quickstart's demo needs the Rust target alone.
[ "${1:-}" = "--demo" ] && exit 0

if [ "$(componentize-py --version 2>/dev/null | awk '{print $2}')" != "$COMPONENTIZE_PY" ]; then
    echo "setup: installing componentize-py $COMPONENTIZE_PY"
    python3 -m pip install --quiet --disable-pip-version-check "componentize-py==$COMPONENTIZE_PY"
fi

if [ ! -d example-tools/units-js/node_modules ]; then
    command -v npm >/dev/null || { echo "setup: npm is missing; install Node.js 20+ (apt-get install nodejs npm)" >&2; exit 1; }
    echo "setup: installing componentize-js (npm ci)"
    (cd example-tools/units-js && npm ci --no-audit --no-fund --loglevel=error)
fi

# Code mode's example (a command the quickstart prints) needs the JavaScript
# and Python toolchains too.
[ "${1:-}" = "--code" ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
if ! command -v redis-server >/dev/null; then
    echo "setup: installing redis-server (apt-get)"
    $sudo apt-get install -y -qq redis-server >/dev/null ||
        { echo "setup: could not install redis-server; install it (apt-get install redis-server)" >&2; exit 1; }
fi

[ "${1:-}" = "--tests" ] || exit 0

if ! command -v haproxy >/dev/null; then
    echo "setup: installing haproxy (apt-get)"
    $sudo apt-get install -y -qq haproxy >/dev/null ||
        { echo "setup: could not install haproxy; install it (apt-get install haproxy)" >&2; exit 1; }
fi

if ! command -v docker-registry >/dev/null; then
    echo "setup: installing docker-registry (apt-get)"
    $sudo apt-get install -y -qq docker-registry >/dev/null ||
        { echo "setup: could not install docker-registry; install it (apt-get install docker-registry)" >&2; exit 1; }
fi

if [ "$(wkg --version 2>/dev/null | awk '{print $2}')" != "$WKG" ]; then
    # The ecosystem's own OCI client: the tests check that what it pushes
    # toolhost loads, and the other way round. Unoptimised and without debug
    # info: it moves a few kilobytes in the tests, and an optimised build
    # takes about 8 minutes on 2 cores.
    echo "setup: installing wkg $WKG (cargo install, unoptimised; about 3 minutes, once)"
    CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 CARGO_PROFILE_RELEASE_LTO=false \
        CARGO_PROFILE_RELEASE_DEBUG=false cargo install --quiet --locked --version "$WKG" wkg
fi

# Verifiers that share no code with toolhost, for what `toolhost sign`
# writes (host/tests/all/registry/independent.rs): sigstore-js for Sigstore
# bundles, sigstore-rs's cosign verification for the .sig tag. cosign
# itself is a Go binary no registry here packages.
if [ ! -d tests/verifiers/sigstore-js/node_modules ]; then
    echo "setup: installing sigstore-js (npm ci in tests/verifiers/sigstore-js)"
    (cd tests/verifiers/sigstore-js && npm ci --no-audit --no-fund --loglevel=error)
fi
if [ ! -x target/verifiers/release/cosign-verify ]; then
    echo "setup: building the sigstore-rs verifier (tests/verifiers/sigstore-rs, unoptimised; about 2 minutes, once)"
fi
# Every time: a no-op when nothing changed, a rebuild when its source did.
cargo build --quiet --release --locked --manifest-path tests/verifiers/sigstore-rs/Cargo.toml \
    --target-dir target/verifiers
