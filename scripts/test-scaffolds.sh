#!/usr/bin/env bash
# The scaffold tier: for every language, `toolhost new` a tool in a fresh
# folder, build it with its one command, call it, and hold it to the lints
# (`toolhost check --strict`). Each builds as a newcomer's would: without
# TOOLHOST, and with toolhost on PATH only if it is there. Prints, per language, the time from `new` to
# the first successful call, the component's size and one fresh call's time.
#
#   scripts/test-scaffolds.sh                 # every language
#   scripts/test-scaffolds.sh python c        # some
#
# Needs what scripts/setup.sh installs and a built toolhost
# (target/release/toolhost, or TOOLHOST). Rust scaffolds build in
# target/scaffolds/cargo, kept between runs.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
export TOOLHOST=${TOOLHOST:-$repo/target/release/toolhost}
langs=("$@")
[ ${#langs[@]} -gt 0 ] || langs=(rust python typescript javascript c)

work=$(mktemp -d "${TMPDIR:-/tmp}/toolhost-scaffolds.XXXXXX")
trap 'rm -rf "$work"' EXIT
export CARGO_TARGET_DIR=$repo/target/scaffolds/cargo
# The JavaScript scaffolds install their packages from npm; keep its cache
# with the build so a second run is warm.
export npm_config_cache=${npm_config_cache:-$repo/target/scaffolds/npm-cache}

failed=()
printf '%-11s %10s %12s %14s\n' language "new→call" component "fresh call"
for lang in "${langs[@]}"; do
    name=hello-$lang
    tool=${name//-/_}
    started=$(date +%s%N)
    if ! (cd "$work" && "$TOOLHOST" new "$name" --lang "$lang" >/dev/null &&
        env -u TOOLHOST "$work/$name/build.sh" >"$work/$name.build.log" 2>&1); then
        echo "scaffold $lang: the build failed:" >&2
        cat "$work/$name.build.log" >&2 || true
        failed+=("$lang")
        continue
    fi
    answer=$("$TOOLHOST" call --config "$work/$name/toolhost.toml" "$tool" '{"name":"Ada"}' 2>&1) || true
    elapsed_ms=$((($(date +%s%N) - started) / 1000000))
    if ! grep -q '"content": "Hello, Ada!"' <<<"$answer" || ! grep -q '"is_error": false' <<<"$answer"; then
        echo "scaffold $lang: the call did not answer \"Hello, Ada!\":" >&2
        echo "$answer" >&2
        failed+=("$lang")
        continue
    fi
    if ! "$TOOLHOST" check --strict --config "$work/$name/toolhost.toml" >"$work/$name.check.log" 2>&1; then
        echo "scaffold $lang: toolhost check --strict failed:" >&2
        cat "$work/$name.check.log" >&2
        failed+=("$lang")
        continue
    fi
    size=$(stat -c %s "$work/$name/$tool.wasm")
    # The second call: the compiled code is cached, so this is one fresh
    # instance's call, process start included.
    timing=$("$TOOLHOST" call --component "$work/$name/$tool.wasm" --memory 256MiB --verbose \
        "$tool" '{"name":"Ada"}' 2>&1 >/dev/null | grep -o 'in [0-9.]* ms' || echo "in ? ms")
    printf '%-11s %8d.%01ds %9d KiB %11s ms\n' "$lang" $((elapsed_ms / 1000)) $((elapsed_ms % 1000 / 100)) \
        $((size / 1024)) "$(awk '{print $2}' <<<"$timing")"
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "test-scaffolds: failed: ${failed[*]}" >&2
    exit 1
fi
echo "test-scaffolds: ${langs[*]}: built, called, lint-clean"
