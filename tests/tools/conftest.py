"""Real tool servers for the tests: the SDK-written one and the misbehaving
one in servers/, started by kvchat's own manager, and the wait for them to
settle (a condition, not a pause)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from chat.tools.config import ServerConfig, StdioServerConfig
from chat.tools.limits import Limits
from chat.tools.manager import ToolServers
from chat.tools.status import ServerState, ServerStatus

SERVERS = Path(__file__).parent / "servers"
SETTLE_TIMEOUT_S = 60.0
"""A bound on waiting for servers to start or close, far above what they
need: one that takes longer is a failure, not a hang of the suite. Tests of
"at once" set kvchat's own limits far above it (LONG), so that only the
behaviour under test can finish in time."""
LONG = Limits(start_timeout_s=600.0, call_timeout_s=600.0, close_wait_s=600.0)
LIMITS = Limits(start_timeout_s=30.0, call_timeout_s=30.0)


def sdk_server(name: str = "sdk", *args: str, env: Mapping[str, str] | None = None) -> ServerConfig:
    return StdioServerConfig(
        name, sys.executable, (str(SERVERS / "sdk_server.py"), *args), env or {}
    )


def raw_server(name: str, mode: str = "good", marks: Path | None = None) -> ServerConfig:
    """The JSON-RPC-by-hand server: quick to start (it imports no SDK)."""
    args = (str(SERVERS / "raw_server.py"), mode, *([str(marks)] if marks else []))
    return StdioServerConfig(name, sys.executable, args)


@asynccontextmanager
async def running(
    configs: Sequence[ServerConfig],
    log_dir: Path,
    *,
    limits: Limits = LIMITS,
    environ: Mapping[str, str] | None = None,
    changes: list[ServerStatus] | None = None,
) -> AsyncIterator[ToolServers]:
    """Servers started, settled (none starting), and closed at the end."""
    manager = ToolServers(
        configs,
        limits=limits,
        environ=dict(os.environ) if environ is None else environ,
        log_dir=log_dir,
        on_change=None if changes is None else changes.append,
    )
    manager.start()
    try:
        await settled(manager)
        yield manager
    finally:
        await closed(manager)


async def closed(manager: ToolServers) -> None:
    """`close()`, bounded: a close that hangs fails the test instead."""
    try:
        await asyncio.wait_for(manager.close(), SETTLE_TIMEOUT_S)
    except asyncio.TimeoutError:
        pytest.fail(f"closing the servers took more than {SETTLE_TIMEOUT_S} s")


async def settled(manager: ToolServers) -> None:
    async def none_starting() -> None:
        while any(s.state is ServerState.STARTING for s in manager.servers.values()):
            await asyncio.sleep(0.02)

    try:
        await asyncio.wait_for(none_starting(), SETTLE_TIMEOUT_S)
    except asyncio.TimeoutError:
        pytest.fail(f"servers still starting after {SETTLE_TIMEOUT_S} s: {manager.servers}")


async def wait_for_file(path: Path, timeout: float = 30.0) -> None:
    async def exists() -> None:
        while not path.exists():
            await asyncio.sleep(0.02)

    try:
        await asyncio.wait_for(exists(), timeout)
    except asyncio.TimeoutError:
        pytest.fail(f"{path} did not appear within {timeout} s")


def process_gone(pid: int) -> bool:
    """Whether `pid` is gone: neither running nor a zombie left unreaped."""
    return not Path(f"/proc/{pid}").exists()
