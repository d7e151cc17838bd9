"""The MCP project's own test server from npm, @modelcontextprotocol/server-everything
(a Node program, installed by .ci/mcp-everything): its tools all pass kvchat's
checks, calls work, and it gets only PATH of kvchat's environment."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from chat.tools.config import StdioServerConfig
from chat.tools.status import ServerState
from tests.servers import TOOLS_DIR
from tests.tools.conftest import running

PROGRAM_ENV = "KVCHAT_MCP_EVERYTHING"
DEFAULT_PROGRAM = (
    TOOLS_DIR
    / "mcp-server-everything-2026.8.31"
    / "node_modules"
    / ".bin"
    / "mcp-server-everything"
)
# Read at import: the suite's autouse fixture clears KVCHAT_* variables in each test.
_CONFIGURED = os.environ.get(PROGRAM_ENV)


def everything_program() -> Path:
    path = Path(_CONFIGURED) if _CONFIGURED else DEFAULT_PROGRAM
    if path.is_file() and os.access(path, os.X_OK):
        return path
    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip("npm or node is missing: server-everything cannot be installed")
    pytest.fail(f"server-everything is not installed ({path}): run .ci/mcp-everything once")


async def test_server_everything(tmp_path: Path) -> None:
    config = StdioServerConfig("everything", str(everything_program()), ("stdio",))
    environ = {"PATH": os.environ["PATH"], "KVCHAT_TEST_SECRET": "s3cret"}
    async with running([config], tmp_path, environ=environ) as servers:
        status = servers.servers["everything"]
        assert status.state is ServerState.READY, status.problem
        names = {tool.name for tool in status.tools}
        assert {"echo", "get-sum", "get-env"} <= names
        # Real schemas from a real server: none is wrongly refused.
        assert [tool.name for tool in status.tools if not tool.usable] == []
        assert (await servers.call_tool("everything", "echo", {"message": "hi"})).text == "Echo: hi"
        total = await servers.call_tool("everything", "get-sum", {"a": 2, "b": 3})
        assert "5" in total.text
        env = await servers.call_tool("everything", "get-env", {})
    # A Node server, which adds nothing of its own: exactly PATH.
    assert json.loads(env.text) == {"PATH": os.environ["PATH"]}
