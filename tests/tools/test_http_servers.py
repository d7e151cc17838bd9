"""A real MCP server over streamable HTTP on loopback (the SDK's own server
API, run by uvicorn in a process of its own): headers that read secrets from
the environment, a refusal, and nothing listening."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from chat.errors import ToolCallError
from chat.tools.config import HttpServerConfig
from chat.tools.limits import Limits
from chat.tools.status import ServerState
from tests.tools.conftest import SERVERS, running, wait_for_file

TOKEN = "t0ken-for-the-test"
LISTEN_TIMEOUT_S = 60.0


@contextmanager
def http_server_at(folder: Path, *options: str) -> Iterator[str]:
    """The URL of a running server that wants `Authorization: Bearer TOKEN`."""
    with http_server_process(folder, *options) as (url, _):
        yield url


@contextmanager
def http_server_process(
    folder: Path, *options: str
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port_file = folder / "port"
    log = folder / "http-server.log"
    command = [sys.executable, str(SERVERS / "sdk_server.py"), "--http", str(port_file)]
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [*command, "--token", TOKEN, *options], stdout=subprocess.DEVNULL, stderr=stderr
        )
    try:
        deadline = time.monotonic() + LISTEN_TIMEOUT_S
        while not port_file.exists() or not port_file.read_text():
            if process.poll() is not None:
                pytest.fail(f"the HTTP test server exited: {log.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail("the HTTP test server did not listen in time")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port_file.read_text()}/mcp", process
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    with http_server_at(tmp_path) as url:
        yield url


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


async def test_a_json_reply_over_the_limit_is_not_read(tmp_path: Path) -> None:
    limits = Limits(start_timeout_s=30.0, call_timeout_s=30.0, message_bytes=1 << 20)
    with http_server_at(tmp_path, "--json") as url:
        config = HttpServerConfig("web", url, {"Authorization": f"Bearer {TOKEN}"})
        async with running([config], tmp_path, limits=limits) as servers:
            with pytest.raises(ToolCallError) as caught:
                await servers.call_tool("web", "big", {"size": 2_000_000})
            assert str(caught.value) == (
                "The tool server 'web' sent a reply larger than 1 MiB, not read, for 'big'."
            )
            # Each HTTP reply is its own: the next call is answered.
            assert (await servers.call_tool("web", "echo", {"text": "next"})).text == "next"


async def test_a_server_killed_mid_call(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    with http_server_process(tmp_path, "--marks", str(marks)) as (url, process):
        config = HttpServerConfig("web", url, {"Authorization": f"Bearer {TOKEN}"})
        async with running([config], tmp_path) as servers:
            call = asyncio.create_task(servers.call_tool("web", "wait", {"seconds": 600}))
            await wait_for_file(marks / "started")
            process.kill()
            with pytest.raises(ToolCallError) as caught:
                await call  # at once, not after the call's timeout
            assert str(caught.value).startswith(
                "The tool server 'web' broke the connection ("
            ) and str(caught.value).endswith(") during the call to 'wait'.")
            status = servers.servers["web"]
            assert status.state is ServerState.FAILED
            assert status.problem is not None
            assert status.problem.startswith("The tool server 'web' broke the connection (")


async def test_a_quiet_stream_is_not_a_broken_connection() -> None:
    """The standalone event stream may be quiet for minutes: its read timeout
    is not the server going away (only a connection that breaks is)."""
    import httpx2

    from chat.tools.http import HttpTransport, _WatchedBody

    class Quiet(httpx2.AsyncByteStream):
        def __init__(self, error: Exception) -> None:
            self.error = error

        async def __aiter__(self):  # type: ignore[no-untyped-def]
            yield b"data: {}\n\n"
            raise self.error

    transport = HttpTransport(
        HttpServerConfig("web", "http://127.0.0.1:1/mcp"), {}, message_limit=1000, read_timeout_s=1
    )
    for error, broken in [
        (httpx2.ReadTimeout("quiet"), False),
        (httpx2.RemoteProtocolError("peer closed connection"), True),
    ]:
        with pytest.raises(type(error)):
            async for _ in _WatchedBody(Quiet(error), transport, bounded=False):
                pass
        assert transport.ended.is_set() is broken
