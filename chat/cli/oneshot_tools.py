"""One-shot mode with tools: `chat -p "..." --allow-tool SERVER.TOOL`.

Only the servers that `--allow-tool` names are started, and only the tools
allowed beforehand run: those `--allow-tool` names and those the config's
`alwaysAllow` lists (the choices saved in the app are not used: a script
runs what its command line says). The model is offered every usable tool
of those servers; a call to one that is not allowed is refused (the model
is told so), and stderr says how to allow it. The reply's text goes to
stdout as usual; each call, and what came of it, is one line on stderr.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from chat.engine.protocol import ChatMessage, Engine, PromptProgress, TokenEvent
from chat.errors import KvchatError
from chat.safe_files import shown_path
from chat.sanitize import sanitize_line
from chat.session.tool_loop import (
    LoopEvent,
    PermissionRequest,
    ToolLoop,
    ToolLoopOutcome,
    ToolLoopSettings,
    offered_tools,
)
from chat.settings.schema import SamplingSettings
from chat.tools.config import ServerConfig, ToolServersConfig, default_file
from chat.tools.manager import ToolServers
from chat.tools.permissions import Choice, Grant, Permissions
from chat.tools.status import ServerState


@dataclass(frozen=True)
class OneShotTools:
    """What the command line asked for: the servers' file and `--allow-tool`."""

    config: ToolServersConfig
    allow: tuple[Grant, ...]
    loop: ToolLoopSettings = field(default_factory=ToolLoopSettings)

    def servers(self) -> list[ServerConfig]:
        """The servers `--allow-tool` names, as the file has them. Raises
        KvchatError for a name the file does not have, or a disabled one."""
        by_name = {server.name: server for server in self.config.servers}
        chosen: list[ServerConfig] = []
        source = shown_path(self.config.path or default_file())
        for grant in self.allow:
            server = by_name.get(grant.server)
            if server is None:
                known = ", ".join(sorted(by_name)) or "none"
                raise KvchatError(
                    f"--allow-tool names the tool server '{sanitize_line(grant.server)}', "
                    f"which {source} does not have (it has: {known})."
                )
            if server.disabled:
                raise KvchatError(
                    f"The tool server '{server.name}' is disabled in {source}; "
                    "--allow-tool cannot use it."
                )
            if server not in chosen:
                chosen.append(server)
        return chosen


def run_tool_turn(
    engine: Engine,
    messages: Sequence[ChatMessage],
    sampling: SamplingSettings,
    tools: OneShotTools,
    on_text: Callable[[TokenEvent], None],
    err: TextIO | None = None,
    on_progress: Callable[[PromptProgress], None] = lambda progress: None,
) -> ToolLoopOutcome:
    """Start the servers, run the turn's tool loop, stop the servers. The
    calls are told on `err` (default: stderr); `on_progress` hears how far
    each step's prompt has been read."""
    if not engine.info.calls_tools:
        raise KvchatError(
            engine.info.no_tools_reason
            or f"The model {engine.info.name} cannot call tools: its chat template does not "
            "show it how (no tools in it, or a syntax kvchat does not know)."
        )
    servers = tools.servers()
    told = sys.stderr if err is None else err
    return asyncio.run(
        _turn(engine, messages, sampling, tools, servers, on_text, told, on_progress)
    )


async def _turn(
    engine: Engine,
    messages: Sequence[ChatMessage],
    sampling: SamplingSettings,
    tools: OneShotTools,
    servers: list[ServerConfig],
    on_text: Callable[[TokenEvent], None],
    err: TextIO,
    on_progress: Callable[[PromptProgress], None],
) -> ToolLoopOutcome:
    manager = ToolServers(servers)
    manager.start()
    try:
        while any(s.state is ServerState.STARTING for s in manager.servers.values()):
            await asyncio.sleep(0.02)  # bounded: a server's start has its own timeout
        for status in manager.servers.values():
            if status.state is not ServerState.READY and status.problem:
                _say(err, f"warning: {status.problem}")
        problems: list[str] = []
        offered = offered_tools(manager.servers, problems=problems)
        for problem in problems:
            _say(err, f"warning: {problem}")
        if not offered:
            raise KvchatError("No tool of the servers --allow-tool names could be offered.")
        permissions = Permissions.from_config(servers, tools.allow, file=None)

        async def refuse(request: PermissionRequest) -> Choice:
            _say(
                err,
                f"the model called the tool '{request.tool}' of the server "
                f"'{request.server}', which is not allowed: refused (allow it with "
                f"--allow-tool {request.server}.{request.tool}).",
            )
            return Choice.REFUSE

        def report(event: LoopEvent) -> None:
            if event.kind == "text" and event.token is not None and not event.token.tool_call:
                on_text(event.token)
            elif event.kind == "progress" and event.progress is not None:
                on_progress(event.progress)
            elif event.kind == "call" and event.request is not None:
                request = event.request
                arguments = sanitize_line(json.dumps(dict(request.arguments), ensure_ascii=False))
                _say(err, f"calling {request.server}.{request.tool} {arguments}")
            elif event.kind == "result" and event.record is not None:
                record = event.record
                what = {
                    "ran": f"{len(record.result.encode()):,} bytes in {record.duration_s:.2f} s",
                    "refused": "refused",
                    "failed": sanitize_line(record.result),
                    "cancelled": "cancelled",
                }[record.outcome]
                cut = " (cut to the result token limit)" if record.cut else ""
                _say(err, f"{record.server}.{record.tool}: {what}{cut}")

        loop = ToolLoop(
            engine,
            manager,
            permissions,
            offered,
            refuse,
            sampling=sampling,
            settings=tools.loop,
            on_event=report,
        )
        try:
            return await loop.run(messages)
        except asyncio.CancelledError:
            loop.cancel()
            raise
    finally:
        await manager.close()


def _say(err: TextIO, line: str) -> None:
    err.write(f"chat: {line}\n")
    err.flush()
