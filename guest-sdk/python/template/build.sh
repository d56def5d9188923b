#!/usr/bin/env bash
# Build the {{tool}} component: ./build.sh  ->  {{tool}}.wasm beside this file.
#
# componentize-py bundles CPython, app.py and the SDK (sdk/python) into a
# component of the contract in wit/. It is pinned: other versions name the
# generated bindings differently. When the componentize-py on PATH is not
# that version, it is installed into .venv here, with pip: a virtual
# environment needs no root, leaves the system's Python alone (Debian and
# Ubuntu refuse `pip install` outside one) and keeps the pin to this tool.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"

version=0.25.1
is_pinned() { [[ $("$1" --version 2>/dev/null) == "componentize-py $version" ]]; }

componentize=componentize-py
if ! is_pinned "$componentize"; then
    componentize=.venv/bin/componentize-py
    if ! is_pinned "$componentize"; then
        command -v python3 >/dev/null 2>&1 ||
            { echo "error: python3 not found; install Python 3 (e.g. apt-get install python3 python3-venv)" >&2; exit 1; }
        if [[ ! -x .venv/bin/python ]]; then
            python3 -m venv .venv ||
                { rm -rf .venv; echo "error: python3 -m venv failed; on Debian and Ubuntu: apt-get install python3-venv" >&2; exit 1; }
        fi
        echo "installing componentize-py==$version into $here/.venv (pip)" >&2
        .venv/bin/python -m pip install --quiet --disable-pip-version-check "componentize-py==$version"
    fi
fi

"$componentize" -d wit -w toolbox componentize -p . -p sdk/python app -o {{tool}}.wasm >/dev/null
echo "built $here/{{tool}}.wasm"
