"""Startup does not pay for the MCP SDK: with no tool server configured,
importing kvchat, parsing the command line, reading the (absent) tool server
file, starting and closing the manager, and building the app import no `mcp`
(nor what it brings: httpx2, jsonschema, starlette, uvicorn)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import asyncio, sys
from chat.cli.main import build_parser
from chat.cli.tool_servers import tool_servers_for_run
from chat.settings.schema import Settings
from chat.tools.manager import ToolServers
from chat.ui.app import ChatApp, Launch

args = build_parser().parse_args([])
config = tool_servers_for_run(args.mcp_config)
assert config.servers == (), config

async def start_and_close():
    servers = ToolServers(config.servers)
    servers.start()
    await servers.close()

asyncio.run(start_and_close())
ChatApp(Launch(Settings(), None))
heavy = ("mcp", "mcp_types", "httpx2", "jsonschema", "starlette", "uvicorn")
print(sorted(m for m in sys.modules if m.split(".")[0] in heavy))
"""


def test_no_sdk_is_imported_without_servers(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
