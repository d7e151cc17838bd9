"""Tool servers that fail in each way a real one can: every fault is one
sentence naming the server, the other servers keep working, nothing hangs."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from chat.errors import ToolCallError
from chat.tools.config import StdioServerConfig
from chat.tools.limits import Limits
from chat.tools.manager import ToolServers
from chat.tools.status import ServerState
from tests.tools.conftest import (
    LONG,
    closed,
    process_gone,
    raw_server,
    running,
    sdk_server,
    settled,
    wait_for_file,
)

QUICK = Limits(start_timeout_s=2.0, call_timeout_s=5.0)


def problem(servers: object, name: str) -> str:
    status = servers.servers[name]  # type: ignore[attr-defined]
    assert status.state is ServerState.FAILED, status
    assert status.problem is not None
    return str(status.problem)


async def test_a_command_that_is_not_there(tmp_path: Path) -> None:
    missing = StdioServerConfig("ghost", "kvchat-no-such-server", ("--x",))
    not_exec = tmp_path / "script"
    not_exec.write_text("#!/bin/sh\n")
    configs = [missing, StdioServerConfig("plain", str(not_exec)), raw_server("fine")]
    async with running(configs, tmp_path) as servers:
        assert problem(servers, "ghost") == (
            "The tool server 'ghost' cannot start: "
            "the command 'kvchat-no-such-server' was not found on PATH."
        )
        assert problem(servers, "plain").endswith("is not executable.")
        # The others keep working.
        assert (await servers.call_tool("fine", "fine", {"x": "ok"})).text == '{"x": "ok"}'
        with pytest.raises(ToolCallError) as refused:
            await servers.call_tool("ghost", "x", {})
        assert str(refused.value) == (
            "The tool server 'ghost' cannot start: the command 'kvchat-no-such-server' "
            "was not found on PATH, so the call to 'x' was not made."
        )


async def test_a_server_that_exits_at_start_is_named_with_its_last_words(tmp_path: Path) -> None:
    # Named when it dies: with the start timeout at LONG, only that settles in time.
    async with running([raw_server("dies", "exit-at-start")], tmp_path, limits=LONG) as servers:
        assert problem(servers, "dies") == (
            "The tool server 'dies' exited with code 4 (its last words on stderr: "
            "'raw_server: cannot open the frobnicator') before it was ready."
        )
    assert "frobnicator" in (tmp_path / "dies.log").read_text()


async def test_a_server_that_never_answers(tmp_path: Path) -> None:
    async with running([raw_server("mute", "silent")], tmp_path, limits=QUICK) as servers:
        assert (
            problem(servers, "mute")
            == "The tool server 'mute' did not answer within 2 s of starting."
        )


async def test_a_server_that_writes_garbage_on_stdout(tmp_path: Path) -> None:
    async with running([raw_server("noisy", "garbage")], tmp_path, limits=QUICK) as servers:
        assert problem(servers, "noisy") == (
            "The tool server 'noisy' did not answer within 2 s of starting; it wrote 1 line "
            "that is not MCP on stdout, the first: 'this is not JSON-RPC'."
        )


async def test_a_banner_line_before_the_messages_is_skipped(tmp_path: Path) -> None:
    async with running([raw_server("chatty", "banner")], tmp_path) as servers:
        assert servers.servers["chatty"].state is ServerState.READY
        result = await servers.call_tool("chatty", "fine", {"x": "1"})
        assert result.text == '{"x": "1"}'


async def test_an_answer_that_is_not_mcp(tmp_path: Path) -> None:
    async with running([raw_server("liar", "bad-result")], tmp_path) as servers:
        assert problem(servers, "liar").startswith(
            "The tool server 'liar' answered with something that is not MCP ("
        )


async def test_tools_with_broken_schemas_are_listed_but_unusable(tmp_path: Path) -> None:
    async with running([raw_server("odd", "bad-schemas")], tmp_path) as servers:
        status = servers.servers["odd"]
        assert status.state is ServerState.READY
        problems = {tool.name: tool.problem for tool in status.tools}
        assert problems["fine"] is None
        assert problems["bad_type"] == (
            "its input schema is not valid JSON Schema (at properties/x/type: "
            "'frobnicate' is not valid under any of the given schemas)"
        )
        # One the SDK itself rejects does not take the others down with it.
        assert problems["not_object"] == (
            "its entry is not valid MCP (inputSchema.required: Input should be a valid list)"
        )
        assert problems["dangling_ref"] == (
            "its input schema's $ref #/$defs/missing points at nothing"
        )
        # A name with an escape sequence is shown without it, and unusable.
        assert problems["badname"] == "its name is not a valid MCP tool name"
        assert (await servers.call_tool("odd", "fine", {"x": "y"})).text == '{"x": "y"}'
        with pytest.raises(ToolCallError) as caught:
            await servers.call_tool("odd", "bad_type", {"x": "y"})
        assert str(caught.value).startswith(
            "The tool 'bad_type' of the tool server 'odd' cannot be used: its input schema"
        )


async def test_a_server_that_dies_mid_call(tmp_path: Path) -> None:
    async with running([raw_server("fragile"), raw_server("steady")], tmp_path) as servers:
        with pytest.raises(ToolCallError) as caught:
            await servers.call_tool("fragile", "crash", {"code": 3})
        assert str(caught.value) == (
            "The tool server 'fragile' exited with code 3 during the call to 'crash'."
        )
        assert problem(servers, "fragile") == "The tool server 'fragile' exited with code 3."
        assert (await servers.call_tool("steady", "fine", {"x": "on"})).text == '{"x": "on"}'


async def test_a_server_killed_mid_call(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    async with running([raw_server("victim", "good", marks)], tmp_path) as servers:
        pid = servers.servers["victim"].pid
        assert pid is not None
        call = asyncio.create_task(servers.call_tool("victim", "wait", {}))
        await wait_for_file(marks / "started")
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(ToolCallError) as caught:
            await call
        assert str(caught.value) == (
            "The tool server 'victim' was killed by SIGKILL during the call to 'wait'."
        )


async def test_a_message_over_the_limit_stops_the_server(tmp_path: Path) -> None:
    limits = Limits(start_timeout_s=30.0, call_timeout_s=30.0, message_bytes=1 << 20)
    async with running([raw_server("flood", "huge-line")], tmp_path, limits=limits) as servers:
        pid = servers.servers["flood"].pid
        with pytest.raises(ToolCallError) as caught:
            await servers.call_tool("flood", "fine", {"x": "1"})
        assert str(caught.value) == (
            "The tool server 'flood' sent a message larger than 1 MiB, so kvchat stopped it "
            "during the call to 'fine'."
        )
        assert problem(servers, "flood") == (
            "The tool server 'flood' sent a message larger than 1 MiB, so kvchat stopped it."
        )
    assert pid is not None and process_gone(pid)


async def test_a_server_that_ignores_signals_is_killed_at_close(tmp_path: Path) -> None:
    # With LONG limits the close ends in time only by its own escalation:
    # stdin closed, SIGTERM (ignored), then SIGKILL.
    config = raw_server("stubborn", "ignore-signals")
    async with running([config], tmp_path, limits=LONG) as servers:
        pid = servers.servers["stubborn"].pid
        assert servers.servers["stubborn"].state is ServerState.READY
    assert pid is not None and process_gone(pid)
    assert servers.servers["stubborn"].state is ServerState.STOPPED


async def test_closing_does_not_wait_for_a_server_still_starting(tmp_path: Path) -> None:
    servers = ToolServers([raw_server("mute", "silent")], limits=LONG, log_dir=tmp_path)
    servers.start()

    async def spawned() -> None:
        while servers.servers["mute"].pid is None:
            await asyncio.sleep(0.02)

    await asyncio.wait_for(spawned(), 60)
    pid = servers.servers["mute"].pid
    await closed(servers)  # bounded at 60 s, far below the 600 s start timeout
    assert servers.servers["mute"].state is ServerState.STOPPED
    assert servers.servers["mute"].problem is None
    assert pid is not None and process_gone(pid)


async def test_closing_during_a_call(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    servers = ToolServers([raw_server("busy", "good", marks)], limits=LONG, log_dir=tmp_path)
    servers.start()
    await settled(servers)
    call = asyncio.create_task(servers.call_tool("busy", "wait", {}))
    await wait_for_file(marks / "started")
    await closed(servers)
    with pytest.raises(ToolCallError) as caught:
        await call
    assert str(caught.value) == (
        "The tool server 'busy' was stopped during the call to 'wait' (kvchat is closing)."
    )


async def test_a_variable_that_is_not_set(tmp_path: Path) -> None:
    server = sdk_server("keyed", env={"API_KEY": "${KVCHAT_TEST_UNSET_KEY}"})  # never started
    environ = {"PATH": os.environ["PATH"]}
    async with running([server], tmp_path, environ=environ) as servers:
        assert problem(servers, "keyed") == (
            "The tool server 'keyed' cannot start: 'env' API_KEY reads the environment "
            "variable KVCHAT_TEST_UNSET_KEY, which is not set."
        )


async def test_what_a_server_says_reaches_no_terminal_as_escapes(tmp_path: Path) -> None:
    from tests.security.canary import assert_no_leak, payload

    config = raw_server("loud", "exit-hostile")
    config = StdioServerConfig(config.name, config.command, config.args, {"CANARY": "${CANARY}"})
    environ = {"PATH": os.environ["PATH"], "CANARY": payload("LASTWORDS").replace("\x00", "")}
    async with running([config], tmp_path, environ=environ) as servers:
        sentence = problem(servers, "loud")
    assert sentence.startswith("The tool server 'loud' exited with code 4 (its last words")
    assert_no_leak(sentence.encode(), "LASTWORDS")
