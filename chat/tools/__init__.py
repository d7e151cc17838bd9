"""Tool servers (MCP): their configuration, their connections, the calls.

No Textual here, and no `mcp` at import: the SDK is imported only when a
server is configured and started (chat.tools.connection), so startup does not
pay for it. One job per module:

- `config`: the `mcpServers` file (kvchat's `mcp.json` or `--mcp-config FILE`);
- `references`: `${VAR}` in a server's environment and headers;
- `status`: what a server is doing (starting, ready with its tools, failed,
  stopped), as the UI will show it;
- `schemas`: whether a tool's input schema can be used;
- `results`: a tool result as text, cut to a size limit;
- `stdio`: the stdio transport (the exact environment, bounded reads, a
  bounded shutdown that kills what ignores it);
- `connection`: one server's life over the SDK's `ClientSession`;
- `manager`: every server of a run, started in the background.
"""
