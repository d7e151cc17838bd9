"""Every tool server of a run, started in the background.

`ToolServers` is what the app (and later the turn's tool loop and the tools
pane) hold: `servers` (each one's state and tools), `start()`, `call_tool()`,
`close()`, and one callback for every change of state.

Why asyncio tasks in the caller's loop, not a thread: the app runs on asyncio
(Textual), the SDK is async (anyio, which runs on asyncio), and a call is
awaited by the turn in that same loop, so it can be cancelled (Esc) by
cancelling the awaiting task. `start()` does not wait: it creates the task
that starts every server and returns, so the first frame never waits for a
server. The callback runs in the loop's thread, where the app may update its
widgets directly.

`mcp` is imported by `start()`, and only when there is a server to start.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chat import paths
from chat.errors import ToolCallError
from chat.tools.config import ServerConfig
from chat.tools.limits import Limits
from chat.tools.results import ToolResult
from chat.tools.status import ServerState, ServerStatus

if TYPE_CHECKING:
    from chat.tools.connection import ServerConnection


class ToolServers:
    def __init__(
        self,
        configs: Sequence[ServerConfig],
        *,
        on_change: Callable[[ServerStatus], None] | None = None,
        limits: Limits | None = None,
        environ: Mapping[str, str] | None = None,
        log_dir: Path | None = None,
    ) -> None:
        """`on_change` is called with a server's new status at each change;
        `environ` is where `${VAR}` and PATH are read (default: kvchat's
        own); `log_dir` holds each server's stderr (default: kvchat's state
        folder)."""
        self._configs = tuple(configs)
        self._statuses = {config.name: ServerStatus(config) for config in self._configs}
        self._on_change = on_change
        self._limits = limits or Limits()
        self._environ = dict(os.environ if environ is None else environ)
        self._log_dir = log_dir or paths.tool_server_logs_dir()
        self._connections: dict[str, ServerConnection] = {}
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    @property
    def servers(self) -> Mapping[str, ServerStatus]:
        """Each server's status now, by its name in the config file."""
        return dict(self._statuses)

    @property
    def limits(self) -> Limits:
        return self._limits

    def log_file(self, server: str) -> Path:
        """Where a stdio server's stderr goes, for "see the log" in messages."""
        return self._log_dir / f"{server}.log"

    def start(self) -> None:
        """Start every server in the background; returns at once. Call it from
        a coroutine or callback of the running event loop. With no server it
        does nothing (and imports nothing)."""
        if self._task is not None or self._closing or not self._configs:
            return
        self._task = asyncio.get_running_loop().create_task(self._run(), name="tool servers")

    async def _run(self) -> None:
        if self._closing:
            return  # closed before this task ran: start nothing
        # Importing the SDK is slow (pydantic models, httpx, starlette): in a
        # thread, so the app's loop goes on drawing meanwhile.
        connection_module = await asyncio.to_thread(
            importlib.import_module, "chat.tools.connection"
        )
        connection_module.keep_sdk_logs_in(self._log_dir)
        connection_class: type[ServerConnection] = connection_module.ServerConnection
        import anyio

        if self._closing:
            return
        for config in self._configs:
            self._connections[config.name] = connection_class(
                config,
                environ=self._environ,
                limits=self._limits,
                log_dir=self._log_dir,
                on_change=self._changed,
            )
        async with anyio.create_task_group() as tasks:
            for connection in self._connections.values():
                tasks.start_soon(connection.run, name=f"tool server {connection.name}")

    def _changed(self, status: ServerStatus) -> None:
        self._statuses[status.name] = status
        if self._on_change is not None:
            self._on_change(status)

    async def call_tool(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        timeout: float | None = None,
    ) -> ToolResult:
        """Call `tool` of `server` with `arguments`: its result (cut to the
        result limit, with a note), or ToolCallError with one sentence.
        `timeout` defaults to the limits' call timeout; cancelling the task
        that awaits this cancels the request on the server."""
        connection = self._connections.get(server)
        if connection is None:
            status = self._statuses.get(server)
            if status is None:
                raise ToolCallError(f"There is no tool server '{server}'.")
            raise ToolCallError(
                f"The tool server '{server}' is not ready (it is {status.state.value})."
            )
        return await connection.call_tool(tool, arguments, timeout)

    async def close(self) -> None:
        """Stop every server and wait until they are gone: a bounded wait, after
        which what is left is cancelled (its shutdown, shielded, still kills
        the processes)."""
        self._closing = True
        for connection in self._connections.values():
            connection.stop()
        task = self._task
        if task is None:
            return
        if not self._connections:
            # Still importing the SDK: nothing runs yet, nothing to wait for.
            task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(task), self._limits.close_wait_s)
        except asyncio.TimeoutError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # close() itself was cancelled
        except Exception:
            pass  # each server's failure is already in its status
        for status in list(self._statuses.values()):
            if status.state in (ServerState.STARTING, ServerState.READY):
                self._changed(ServerStatus(status.config, ServerState.STOPPED))
