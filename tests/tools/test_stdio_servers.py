"""A real MCP server (written with the SDK's server API) over stdio, started
by kvchat's manager: its tools, calls, the environment it gets, results cut
to the limit, timeouts and cancellation that reach the server, a clean close."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from chat.errors import ToolCallError
from chat.tools.limits import Limits
from chat.tools.manager import ToolServers
from chat.tools.status import ServerState, ServerStatus
from tests.tools.conftest import process_gone, running, sdk_server, wait_for_file

# The SDK server takes a while to import its SDK: the tests that leave it as
# it was share one, in one event loop for the module.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@dataclass
class Shared:
    servers: ToolServers
    marks: Path


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Shared]:
    folder = tmp_path_factory.mktemp("shared-server")
    marks = folder / "marks"
    marks.mkdir()
    limits = Limits(start_timeout_s=30.0, call_timeout_s=30.0, result_bytes=64 * 1024)
    config = sdk_server("sdk", "--marks", str(marks))
    async with running([config], folder, limits=limits) as servers:
        yield Shared(servers, marks)


def clear(marks: Path) -> None:
    for mark in marks.iterdir():
        mark.unlink()


async def test_a_server_lists_its_tools_and_answers(shared: Shared) -> None:
    status = shared.servers.servers["sdk"]
    assert status.state is ServerState.READY
    assert status.server_name == "kvchat-test-server"
    assert status.pid is not None
    echo = status.tool("echo")
    assert echo is not None and echo.usable
    assert echo.description == "Say the text back."
    assert echo.input_schema["properties"]["text"]["type"] == "string"
    assert {tool.name for tool in status.tools} >= {"echo", "environment", "big", "wait"}
    result = await shared.servers.call_tool("sdk", "echo", {"text": "héllo"})
    assert result.text == "héllo" and not result.cut and not result.is_error


async def test_its_life_is_told_to_the_callback_and_ends_with_no_process(tmp_path: Path) -> None:
    changes: list[ServerStatus] = []
    env = {"GIVEN": "${MINE}", "FIXED": "plain", "DEFAULTED": "${NOPE:-d}"}
    environ = {"PATH": "/usr/bin:/bin", "SECRET_TOKEN": "s3cret", "HOME": "/home/me", "MINE": "v"}
    async with running(
        [sdk_server(env=env)], tmp_path, environ=environ, changes=changes
    ) as servers:
        pid = servers.servers["sdk"].pid
        result = await servers.call_tool("sdk", "environment", {})
    states = [change.state for change in changes]
    assert states[0] is ServerState.STARTING
    assert ServerState.READY in states
    assert states[-1] is ServerState.STOPPED
    assert pid is not None and process_gone(pid)
    # It got PATH and what its entry names, nothing else of kvchat's environment.
    seen = dict(line.split("=", 1) for line in result.text.splitlines())
    seen.pop("LC_CTYPE", None)  # a Python server sets it itself without a locale (PEP 538)
    assert seen == {"PATH": "/usr/bin:/bin", "GIVEN": "v", "FIXED": "plain", "DEFAULTED": "d"}


async def test_start_returns_at_once(tmp_path: Path) -> None:
    servers = ToolServers([sdk_server()], log_dir=tmp_path)
    servers.start()  # not awaited: the first frame never waits for a server
    assert servers.servers["sdk"].state is ServerState.STARTING
    await servers.close()
    assert servers.servers["sdk"].state is ServerState.STOPPED


async def test_a_result_larger_than_the_limit_is_cut_with_a_note(shared: Shared) -> None:
    result = await shared.servers.call_tool("sdk", "big", {"size": 10_000_000})
    assert result.cut and result.size == 10_000_000
    kept, note = result.text.split("\n[kvchat cut", 1)
    assert kept == "x" * 64 * 1024
    assert "10,000,000 bytes" in note and "64 KiB" in note
    # The server is still there for the next call.
    assert (await shared.servers.call_tool("sdk", "echo", {"text": "after"})).text == "after"


async def test_a_call_that_times_out_is_cancelled_on_the_server(shared: Shared) -> None:
    clear(shared.marks)
    with pytest.raises(ToolCallError) as caught:
        await shared.servers.call_tool("sdk", "wait", {"seconds": 600}, timeout=1.0)
    assert str(caught.value) == (
        "The tool server 'sdk' did not answer the call to 'wait' within 1 s: "
        "the call was cancelled."
    )
    await wait_for_file(shared.marks / "cancelled")
    assert shared.servers.servers["sdk"].state is ServerState.READY


async def test_cancelling_the_awaiting_task_cancels_the_request(shared: Shared) -> None:
    clear(shared.marks)
    servers = shared.servers
    call = asyncio.create_task(servers.call_tool("sdk", "wait", {"seconds": 600}))
    await wait_for_file(shared.marks / "started")
    call.cancel()  # what Esc will do
    with pytest.raises(asyncio.CancelledError):
        await call
    await wait_for_file(shared.marks / "cancelled")
    assert (await servers.call_tool("sdk", "echo", {"text": "still here"})).text == "still here"


async def test_calls_that_cannot_be_made_say_why(shared: Shared) -> None:
    servers = shared.servers
    with pytest.raises(ToolCallError, match=r"^The tool server 'sdk' has no tool 'nope'\.$"):
        await servers.call_tool("sdk", "nope", {})
    with pytest.raises(ToolCallError, match=r"^There is no tool server 'other'\.$"):
        await servers.call_tool("other", "echo", {})
    refused = await servers.call_tool("sdk", "echo", {"wrong": 1})
    # The SDK server reports bad arguments as a tool error, for the model to read.
    assert refused.is_error and "text" in refused.text


async def test_start_and_close_with_no_server_do_nothing() -> None:
    servers = ToolServers([])
    servers.start()
    await servers.close()
    assert servers.servers == {}
