"""A small MCP server written with the SDK's own server API, for the tests.

Run as `python sdk_server.py` it serves stdio; `--http PORT_FILE` serves
streamable HTTP on loopback on a free port (written to PORT_FILE once it
listens), and `--token T` makes it refuse requests without
`Authorization: Bearer T`; `--json` answers in JSON bodies instead of SSE
events. `--marks DIR` is where tools leave files the tests
wait for (a call began, a call was cancelled).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("kvchat-test-server")
marks = Path(".")


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return text


@server.tool()
def environment() -> str:
    """Every environment variable this server got, one NAME=value a line."""
    return "\n".join(f"{name}={value}" for name, value in sorted(os.environ.items()))


@server.tool()
def big(size: int) -> str:
    """A text of `size` bytes."""
    return "x" * size


@server.tool()
async def wait(seconds: float) -> str:
    """Sleep, leaving marks: `started`, then `cancelled` if the call is cancelled."""
    (marks / "started").write_text("started")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        (marks / "cancelled").write_text("cancelled")
        raise
    return "done"


@server.tool()
def crash(code: int) -> str:
    """Exit at once, mid-call, with `code`."""
    sys.stdout.flush()
    os._exit(code)


def _serve_http(port_file: Path, token: str | None, json_response: bool) -> None:
    import uvicorn

    app = server.streamable_http_app(json_response=json_response)

    async def guarded(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "http" and token is not None:
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"no"})
                return
        await app(scope, receive, send)

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    config = uvicorn.Config(guarded, log_level="warning", lifespan="on")
    web = uvicorn.Server(config)

    async def serve() -> None:
        task = asyncio.create_task(web.serve(sockets=[listener]))
        while not web.started:
            await asyncio.sleep(0.01)
        port_file.write_text(str(listener.getsockname()[1]))
        await task

    asyncio.run(serve())


def main() -> None:
    global marks
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", metavar="PORT_FILE")
    parser.add_argument("--token")
    parser.add_argument("--json", action="store_true", help="HTTP: JSON replies, not SSE")
    parser.add_argument("--marks", default=".")
    args = parser.parse_args()
    marks = Path(args.marks)
    if args.http:
        _serve_http(Path(args.http), args.token, args.json)
    else:
        server.run()


if __name__ == "__main__":
    main()
