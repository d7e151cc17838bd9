"""The tool servers (MCP) of a run, as the `chat` command resolves them:
`--mcp-config FILE`, or `mcp.json` in the config folder.

A file given with `--mcp-config` that cannot be read at all is a usage error
(exit 2): the user asked for it by name. Mistakes in single entries, and any
in the default file, are warnings: the servers that are fine still start.
No `mcp` import here: only reading the file.
"""

from __future__ import annotations

from pathlib import Path

from chat.errors import KvchatError
from chat.safe_files import shown_path
from chat.sanitize import sanitize_line
from chat.tools.config import HttpServerConfig, ToolServersConfig, default_file, load_tool_servers


def tool_servers_for_run(option: str | None) -> ToolServersConfig:
    """The servers `--mcp-config` names (its value, or None without it)."""
    if option is None:
        return load_tool_servers()
    config = load_tool_servers(Path(option).expanduser())
    if config.unreadable:
        raise KvchatError(config.problems[0])
    return config


def describe(config: ToolServersConfig) -> str:
    """The servers as TOML comments, for the end of `--print-config`."""
    source = config.path or default_file()
    lines = [f"# Tool servers (MCP), from {shown_path(source)}:"]
    if not config.servers:
        lines.append("#   (none)" if config.path else "#   (none: the file does not exist)")
    for server in config.servers:
        kind = "http" if isinstance(server, HttpServerConfig) else "stdio"
        notes = []
        if isinstance(server, HttpServerConfig) and server.headers:
            notes.append("headers: " + ", ".join(sorted(server.headers)))
        elif not isinstance(server, HttpServerConfig) and server.env:
            notes.append("env: " + ", ".join(sorted(server.env)))
        if server.always_allow:
            notes.append("always allowed: " + ", ".join(server.always_allow))
        if server.disabled:
            notes.append("disabled")
        extra = f" ({sanitize_line('; '.join(notes))})" if notes else ""
        lines.append(f"#   {server.name}: {kind}: {server.describe()}{extra}")
    return "\n".join(lines)
