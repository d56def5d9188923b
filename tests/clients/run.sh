#!/usr/bin/env bash
# The client tests: real clients against `toolhost serve`, over stdio and
# Streamable HTTP. The official MCP Python SDK 2.x (both protocol eras) and
# httpx on the plain HTTP API, in target/clients-venv; then the MCP SDK 1.x
# and a LangGraph agent using langchain-mcp-adapters, in
# target/clients-venv-langchain (the adapters need mcp<2, so they cannot
# share a venv with mcp 2.x).
#
# Each venv is created from its pinned requirements file, and recreated
# only when that file changes (a copy is kept inside the venv to compare).
#
#   tests/clients/run.sh                  # all of it, with target/release/toolhost
#   TOOLHOST_BIN=path/to/toolhost tests/clients/run.sh -k cancel -x   # pytest arguments pass through
#   tests/clients/run.sh --setup          # only create or update the venvs (the benchmark uses target/clients-venv)
#
# Needs the binary (cargo build --release) and the components
# (scripts/build-tools.sh); Python 3.11 with venv and pip. Exit status:
# pytest's, non-zero if either run failed.
set -euo pipefail
cd "$(dirname "$0")/../.."

# venv DIR REQUIREMENTS: DIR holds exactly REQUIREMENTS' packages.
venv() {
    local dir=$1 requirements=$2
    if [ ! -x "$dir/bin/python" ] || ! cmp -s "$requirements" "$dir/requirements.txt"; then
        echo "clients: installing $requirements into $dir"
        python3 -m venv --clear "$dir"
        "$dir/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
        cp "$requirements" "$dir/requirements.txt"
    fi
}

venv target/clients-venv tests/clients/requirements.txt
venv target/clients-venv-langchain tests/clients/requirements-langchain.txt
if [ "${1:-}" = "--setup" ]; then
    exit 0
fi

export TOOLHOST_BIN=${TOOLHOST_BIN:-target/release/toolhost}
# Keep the tree clean: no bytecode or pytest cache next to the tests.
export PYTHONDONTWRITEBYTECODE=1
pytest=(-p no:cacheprovider -q)

# run VENV FILES... -- PYTEST_ARGS...: pytest's status, but 5 (nothing
# selected, e.g. by a -k that matches only the other run's tests) counts as
# 0 here; it is the status only when neither run selected anything.
status=0
empty=0
run() {
    local venv=$1 rc=0
    shift
    "$venv/bin/python" -m pytest "${pytest[@]}" "$@" || rc=$?
    case $rc in
        0) ;;
        5) empty=$((empty + 1)) ;;
        *) status=$rc ;;
    esac
}
echo "clients: mcp $(target/clients-venv/bin/python -c 'import importlib.metadata as m; print(m.version("mcp"))') and the HTTP API, against $TOOLHOST_BIN"
run target/clients-venv tests/clients/test_mcp_sdk.py tests/clients/test_http_api.py "$@"
echo "clients: mcp $(target/clients-venv-langchain/bin/python -c 'import importlib.metadata as m; print(m.version("mcp"))'), LangGraph and approval, against $TOOLHOST_BIN"
run target/clients-venv-langchain tests/clients/test_mcp_sdk.py tests/clients/test_langgraph.py tests/clients/test_approval.py tests/clients/test_deploy.py "$@"
if [ "$status" -eq 0 ] && [ "$empty" -eq 2 ]; then
    status=5
fi
exit $status
