"""A published MCP server, as a user would configure it: `mcp-server-time`
from PyPI (in the test extra), started by its own console script."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from chat.tools.config import parse_document
from chat.tools.status import ServerState
from tests.tools.conftest import running


def time_server_command() -> Path:
    path = Path(sys.executable).parent / "mcp-server-time"
    if not path.is_file():
        pytest.fail("mcp-server-time is not installed: pip install -e '.[test]'")
    return path


async def test_mcp_server_time_from_a_config_file(tmp_path: Path) -> None:
    # The example of docs/tools.md, with the script's full path.
    document = {
        "mcpServers": {
            "time": {
                "command": str(time_server_command()),
                "args": ["--local-timezone", "UTC"],
            }
        }
    }
    config = parse_document(tmp_path / "mcp.json", document)
    assert config.problems == ()
    async with running(config.servers, tmp_path) as servers:
        status = servers.servers["time"]
        assert status.state is ServerState.READY, status.problem
        assert {tool.name for tool in status.tools} == {"get_current_time", "convert_time"}
        assert all(tool.usable for tool in status.tools)
        result = await servers.call_tool("time", "get_current_time", {"timezone": "Europe/Paris"})
        assert not result.is_error
        assert json.loads(result.text)["timezone"] == "Europe/Paris"
        refused = await servers.call_tool("time", "get_current_time", {"timezone": "Mars/Olympus"})
        assert refused.is_error  # the server's own error, for the model to read
