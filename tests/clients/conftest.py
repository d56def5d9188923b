"""What every client test shares: the toolhost binary, the manifest, one
`toolhost serve --listen` per test session, and a reader of its /metrics.

The binary is $TOOLHOST_BIN (default target/release/toolhost); the manifest
is tests/clients/toolhost.toml (calc and the probe, granted nothing, 2 s
timeout), and tests/clients/patient.toml for the tests that cancel a call
(the probe alone, with a deadline no test waits out). Async tests run on
anyio's pytest plugin, which the mcp SDK brings.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = Path(__file__).resolve().parent / "toolhost.toml"
PATIENT_MANIFEST = Path(__file__).resolve().parent / "patient.toml"
COMPONENTS = [ROOT / "target/tools/calc.wasm", ROOT / "target/tools/probe.wasm"]

# A server answers /healthz once its components are loaded; the first start
# after a build compiles them (seconds), later ones hit the cache.
START_TIMEOUT_S = 120.0


def toolhost_bin() -> Path:
    path = Path(os.environ.get("TOOLHOST_BIN", ROOT / "target/release/toolhost"))
    return path if path.is_absolute() else ROOT / path


def serve_stdio_args(manifest: Path = MANIFEST) -> list[str]:
    """The arguments of `toolhost serve --stdio` on a test manifest."""
    return ["--config", str(manifest), "serve", "--stdio"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def toolhost() -> Path:
    """The binary, after checking that it and the components exist."""
    binary = toolhost_bin()
    if not binary.is_file():
        pytest.fail(f"{binary} does not exist: build it (cargo build --release) or set TOOLHOST_BIN")
    missing = [str(c) for c in COMPONENTS if not c.is_file()]
    if missing:
        pytest.fail(f"missing components {missing}: run scripts/build-tools.sh")
    return binary


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def http_server(toolhost: Path) -> Iterator[str]:
    """`toolhost serve --listen 127.0.0.1:PORT` for the session; yields its base URL."""
    yield from serve_http(toolhost, MANIFEST)


@pytest.fixture(scope="session")
def patient_mcp_url(toolhost: Path) -> Iterator[str]:
    """The MCP endpoint of a session's server on tests/clients/patient.toml."""
    for base in serve_http(toolhost, PATIENT_MANIFEST):
        yield f"{base}/mcp"


def serve_http(toolhost: Path, manifest: Path) -> Iterator[str]:
    """Runs `toolhost serve --listen` on `manifest` while the caller iterates;
    yields its base URL once it answers /healthz."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tempfile.NamedTemporaryFile(prefix="toolhost-serve-", suffix=".log", delete=False)
    process = subprocess.Popen(
        [str(toolhost), "--config", str(manifest), "serve", "--listen", f"127.0.0.1:{port}"],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )

    def server_log() -> str:
        return Path(log.name).read_text(errors="replace")[-4000:]

    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            pytest.fail(f"toolhost serve exited with {process.returncode} before answering /healthz:\n{server_log()}")
        try:
            if httpx.get(f"{base}/healthz", timeout=1.0, trust_env=False).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"toolhost serve did not answer /healthz within {START_TIMEOUT_S:.0f} s:\n{server_log()}")
        time.sleep(0.1)
    try:
        yield base
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        os.unlink(log.name)


@pytest.fixture(scope="session")
def mcp_url(http_server: str) -> str:
    return f"{http_server}/mcp"


# A sample line of Prometheus/OpenMetrics text: its name, labels (if any)
# and value; a timestamp after the value is ignored.
SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(?:\{([^}]*)\})?\s+(\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metric_samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """Each sample of a server's /metrics text: its name, its labels and its value."""
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match:
            yield match.group(1), dict(LABEL.findall(match.group(2) or "")), float(match.group(3))
