"""The benchmark's MCP server, written with the SDK's own server API: one
tool that says its text back, so that a call costs the server next to
nothing and what is measured is the client's path. Run it as a program;
it serves stdio."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("kvchat-bench-server")


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return text


if __name__ == "__main__":
    server.run()
