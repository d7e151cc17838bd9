"""One broken tool must not take its server's other tools down.

The SDK validates a `tools/list` answer as a whole: one tool whose entry is
not valid MCP (an input schema with `"required": "x"`) fails the listing and
so the server. The guard sits between the transport and the session, sees
each `tools/list` answer first, checks its tools one by one with the SDK's
own validation for the protocol version the server chose, and replaces each
bad one with a stand-in that validates (its name, an empty object schema),
remembering why: the server's other tools are then listed as usual, and the
bad one is listed as unusable, with that reason (chat.tools.connection).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import mcp_types
from mcp.shared.message import SessionMessage
from mcp_types import methods
from pydantic import ValidationError

from chat.sanitize import sanitize_line

# The transports' streams are anyio memory streams or the SDK's own wrappers
# of them; the guard only iterates, sends and closes them.
ReadStream = Any
WriteStream = Any


class ToolListGuard:
    def __init__(self) -> None:
        self.broken: dict[str, str] = {}
        """Tool name -> why its entry was not valid MCP."""
        self.dropped = 0
        """Entries without even a name: left out."""
        self._asked: dict[Any, str] = {}
        self._version: str | None = None

    def note_outgoing(self, item: SessionMessage) -> None:
        message = item.message
        if isinstance(message, mcp_types.JSONRPCRequest) and message.method in (
            "initialize",
            "tools/list",
        ):
            self._asked[message.id] = message.method

    def fix_incoming(self, item: SessionMessage | Exception) -> SessionMessage | Exception:
        if not isinstance(item, SessionMessage):
            return item
        message = item.message
        if not isinstance(message, mcp_types.JSONRPCResponse):
            return item
        method = self._asked.pop(message.id, None)
        if method == "initialize":
            version = message.result.get("protocolVersion")
            self._version = version if isinstance(version, str) else None
        elif method == "tools/list":
            tools = message.result.get("tools")
            if isinstance(tools, list) and self._version is not None:
                fixed = dict(message.result, tools=self._checked(tools))
                return SessionMessage(
                    mcp_types.JSONRPCResponse(jsonrpc="2.0", id=message.id, result=fixed),
                    metadata=item.metadata,
                )
        return item

    def _checked(self, tools: list[Any]) -> list[Any]:
        kept: list[Any] = []
        for tool in tools:
            try:
                methods.validate_server_result("tools/list", str(self._version), {"tools": [tool]})
            except ValueError as error:  # ValidationError is one; so is an unknown version
                name = tool.get("name") if isinstance(tool, dict) else None
                if not isinstance(name, str) or not name:
                    self.dropped += 1
                    continue
                self.broken[name] = _words(error)
                kept.append({"name": name, "inputSchema": {"type": "object"}})
            else:
                kept.append(tool)
        return kept


@asynccontextmanager
async def guarded(
    read: ReadStream, write: WriteStream
) -> AsyncIterator[tuple[ReadStream, WriteStream, ToolListGuard]]:
    """The transport's streams, with a guard between them and the session."""
    guard = ToolListGuard()
    to_session, session_reads = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    session_writes, from_session = anyio.create_memory_object_stream[SessionMessage](16)

    async def inward() -> None:
        with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            async with to_session:
                async for item in read:
                    await to_session.send(guard.fix_incoming(item))

    async def outward() -> None:
        with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            async with from_session, write:
                async for item in from_session:
                    guard.note_outgoing(item)
                    await write.send(item)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(inward)
        tasks.start_soon(outward)
        try:
            yield session_reads, session_writes, guard
        finally:
            session_reads.close()
            session_writes.close()
            tasks.cancel_scope.cancel()


def _words(error: ValueError) -> str:
    if isinstance(error, ValidationError) and error.errors():
        first = error.errors()[0]
        # The path starts with "tools.0." (the one tool checked): drop that.
        where = ".".join(str(part) for part in first.get("loc", ())[2:]) or "its entry"
        return sanitize_line(f"its entry is not valid MCP ({where}: {first.get('msg')})")[:200]
    return "its entry is not valid MCP"
