"""A real MCP server over streamable HTTP on loopback (the SDK's own server
API, run by uvicorn in a process of its own): headers that read secrets from
the environment, a refusal, and nothing listening."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chat.tools.config import HttpServerConfig
from chat.tools.status import ServerState
from tests.tools.conftest import SERVERS, running

TOKEN = "t0ken-for-the-test"
LISTEN_TIMEOUT_S = 60.0


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    """The URL of a running server that wants `Authorization: Bearer TOKEN`."""
    port_file = tmp_path / "port"
    process = subprocess.Popen(
        [
            sys.executable,
            str(SERVERS / "sdk_server.py"),
            "--http",
            str(port_file),
            "--token",
            TOKEN,
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "http-server.log").open("wb"),
    )
    try:
        deadline = time.monotonic() + LISTEN_TIMEOUT_S
        while not port_file.exists() or not port_file.read_text():
            if process.poll() is not None:
                pytest.fail(
                    f"the HTTP test server exited: {(tmp_path / 'http-server.log').read_text()}"
                )
            if time.monotonic() > deadline:
                pytest.fail("the HTTP test server did not listen in time")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port_file.read_text()}/mcp"
    finally:
        process.terminate()
        process.wait(10)


async def test_a_server_over_http_with_a_secret_header(http_server: str, tmp_path: Path) -> None:
    config = HttpServerConfig("web", http_server, {"Authorization": "Bearer ${KV_TEST_TOKEN}"})
    environ = {"PATH": "/usr/bin", "KV_TEST_TOKEN": TOKEN}
    async with running([config], tmp_path, environ=environ) as servers:
        status = servers.servers["web"]
        assert status.state is ServerState.READY, status.problem
        assert status.tool("echo") is not None
        assert (await servers.call_tool("web", "echo", {"text": "over http"})).text == "over http"
        result = await servers.call_tool("web", "big", {"size": 3_000_000})
        assert result.cut and result.size == 3_000_000


async def test_a_refused_header_is_said(http_server: str, tmp_path: Path) -> None:
    config = HttpServerConfig("web", http_server, {"Authorization": "Bearer wrong"})
    async with running([config], tmp_path) as servers:
        status = servers.servers["web"]
        assert status.state is ServerState.FAILED
        assert status.problem is not None and status.problem.startswith("The tool server 'web' ")
        assert status.problem == (
            "The tool server 'web' refused to start: it answered HTTP 401 Unauthorized "
            "(the headers in its entry may be wrong)."
        )


async def test_nothing_listening(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = HttpServerConfig("gone", f"http://127.0.0.1:{port}/mcp")
    async with running([config], tmp_path) as servers:
        status = servers.servers["gone"]
        assert status.state is ServerState.FAILED
        assert status.problem is not None
        assert status.problem.startswith("The tool server 'gone' cannot be reached")
