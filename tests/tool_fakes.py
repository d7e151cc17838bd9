"""A scripted model that calls tools, and tool servers that answer from a
script: fast, deterministic stand-ins for the tool turn's and the UI's tests.
Every path they stand in for also has a test with the real demo model and a
real MCP server (tests/session/test_tool_turn.py)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from chat.engine.protocol import ChatMessages, EngineEvent, Finished
from chat.engine.tool_calls.calls import ToolCall, ToolDefinition
from chat.engine.tool_calls.syntax import HERMES
from chat.settings.schema import SamplingSettings
from chat.tools.config import StdioServerConfig
from chat.tools.results import ToolResult
from chat.tools.status import ServerState, ServerStatus, ToolInfo
from tests.fakes import ScriptedEngine

ECHO_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
}


class ScriptedToolEngine(ScriptedEngine):
    """A ScriptedEngine shown how to call tools (Hermes): the reply numbered
    `n` (from 0, counting every call of `stream_reply`) ends with the call
    `calls[n]`, its tokens the text before it. `offered` records the names
    of the tools each reply was offered. Its token count of a prompt adds a
    token per 8 characters of the tools' definitions."""

    def __init__(
        self, replies: Sequence[Sequence[str]], calls: Mapping[int, ToolCall], **options: Any
    ) -> None:
        super().__init__(replies, **options)
        self.info = replace(self.info, tool_calls=HERMES)
        self.tool_calls = dict(calls)
        self.offered: list[list[str]] = []

    def tokenize_chat(
        self,
        messages: ChatMessages,
        add_generation_prompt: bool = True,
        tools: Sequence[ToolDefinition] = (),
    ) -> list[int]:
        tokens = super().tokenize_chat(messages, add_generation_prompt)
        extra = len(json.dumps([tool.for_template() for tool in tools])) // 8 if tools else 0
        return tokens + list(range(len(tokens), len(tokens) + extra))

    def stream_reply(
        self,
        messages: ChatMessages,
        sampling: SamplingSettings,
        cancel: threading.Event,
        record_probs: bool = False,
        continue_last: bool = False,
        tools: Sequence[ToolDefinition] = (),
    ) -> Iterator[EngineEvent]:
        number = len(self.calls)
        self.offered.append([tool.name for tool in tools])
        for event in super().stream_reply(
            messages, sampling, cancel, record_probs, continue_last, tools
        ):
            if isinstance(event, Finished) and number in self.tool_calls and not cancel.is_set():
                event = replace(event, tool_calls=(self.tool_calls[number],))
            yield event


def echo_call(text: str) -> ToolCall:
    return ToolCall("echo", {"text": text})


class FakeToolServers:
    """Ready tool servers (`tools`: server name to tool names, each taking
    `{"text": ...}`) whose calls answer with their text; with `hold`, a call
    waits until `release` is set (or it is cancelled). `called` records each
    call's (server, tool, arguments); `cancelled` counts calls cancelled."""

    def __init__(self, tools: Mapping[str, Sequence[str]] | None = None) -> None:
        tools = tools if tools is not None else {"notes": ["echo"]}
        self._servers = {
            name: ServerStatus(
                StdioServerConfig(name, "notes-server"),
                ServerState.READY,
                tuple(ToolInfo(tool, f"The {tool} tool.", ECHO_SCHEMA) for tool in names),
            )
            for name, names in tools.items()
        }
        self.hold = False
        self.release = asyncio.Event()
        self.called: list[tuple[str, str, dict[str, Any]]] = []
        self.cancelled = 0

    @property
    def servers(self) -> Mapping[str, ServerStatus]:
        return dict(self._servers)

    def set_state(self, name: str, state: ServerState) -> None:
        self._servers[name] = replace(self._servers[name], state=state)

    async def call_tool(
        self, server: str, tool: str, arguments: Mapping[str, Any], *, timeout: float | None = None
    ) -> ToolResult:
        self.called.append((server, tool, dict(arguments)))
        if self.hold:
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        text = str(arguments.get("text", ""))
        return ToolResult(text, size=len(text.encode()))
