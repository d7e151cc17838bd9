"""A real llama-server on loopback, for the tests of the remote engines.

The binary is built from the llama.cpp sources vendored in llama-cpp-python
by `.ci/llama-server`, which prints its path; `.ci/run` exports it as
KVCHAT_LLAMA_SERVER. Without it the tests fail (not skip) and say how to get
it: talking to a real server is what they are for.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import installed_demo_model

SERVER_ENV = "KVCHAT_LLAMA_SERVER"
TOOLS_DIR = Path(os.environ.get("KVCHAT_TOOLS", Path.home() / ".cache" / "kvchat-tools"))
"""The cache folder outside the clone where .ci/ scripts keep what they build or install."""
DEFAULT_BINARY = TOOLS_DIR / "llama.cpp-0.3.36" / "bin" / "llama-server"
# Read at import: the suite's autouse fixture clears KVCHAT_* variables in each test.
_CONFIGURED = os.environ.get(SERVER_ENV)
START_TIMEOUT_S = 120.0


@dataclass
class RunningServer:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        """Kill it at once (as a crash would), and wait for it to be gone."""
        self.process.kill()
        self.process.wait(10)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def llama_server_binary() -> Path:
    path = Path(_CONFIGURED) if _CONFIGURED else DEFAULT_BINARY
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(
            f"llama-server is not built ({path}). Run .ci/llama-server (10-30 minutes, "
            f"once; it prints the path), then export {SERVER_ENV}=<that path>."
        )
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def llama_server(
    log_dir: Path,
    extra: Sequence[str] = (),
    n_ctx: int = 4096,
    threads: int = 2,
    port: int | None = None,
    model: Path | None = None,
) -> Iterator[RunningServer]:
    """llama-server with the demo model (or `model`) on a free loopback port,
    ready (its /health says ok) when this yields; killed on the way out."""
    binary = llama_server_binary()
    model = model or installed_demo_model()
    port = port or free_port()
    log = log_dir / f"llama-server-{port}.log"
    command = [
        str(binary),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-c",
        str(n_ctx),
        "--threads",
        str(threads),
        "--parallel",
        "1",
        *extra,
    ]
    with _running(command, log, port, "/health") as server:
        yield server


@contextmanager
def llama_cpp_server(
    log_dir: Path, n_ctx: int = 4096, port: int | None = None
) -> Iterator[RunningServer]:
    """llama-cpp-python's own OpenAI-compatible server (`python -m
    llama_cpp.server`, the package's [server] extra) with the demo model, ready
    (its /v1/models answers) when this yields; killed on the way out."""
    model = installed_demo_model()
    port = port or free_port()
    log = log_dir / f"llama-cpp-server-{port}.log"
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", str(n_ctx),
        "--n_threads", "1",
    ]  # fmt: skip
    with _running(command, log, port, "/v1/models") as server:
        yield server


@contextmanager
def _running(
    command: Sequence[str], log: Path, port: int, ready_path: str
) -> Iterator[RunningServer]:
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    server = RunningServer(f"http://127.0.0.1:{port}", process, log)
    try:
        _wait_until_ready(server, ready_path)
        yield server
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def _wait_until_ready(server: RunningServer, ready_path: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            pytest.fail(f"the server exited at start:\n{server.log_text()[-2000:]}")
        try:
            with urllib.request.urlopen(server.url + ready_path, timeout=1) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass  # not listening yet, or 503 while the model loads
        time.sleep(0.1)
    pytest.fail(f"the server was not ready within {START_TIMEOUT_S:g} s")
