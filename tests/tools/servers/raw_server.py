"""A tool server that misbehaves on purpose, written without the SDK: plain
JSON-RPC lines on stdin/stdout, so each fault is exactly what the test asks.

`python raw_server.py MODE [MARKS]`; MARKS is a folder where a call leaves
the file `started` when it begins. The modes:
- `good`: behaves; its tool `fine` answers with its arguments, `crash` exits
  mid-call with code 3, `wait` never answers;
- `exit-at-start`: says a last word on stderr and exits with code 4;
- `exit-hostile`: the same, its last word full of terminal escapes (the
  security tests' canary, from the environment variable CANARY);
- `silent`: reads stdin and never answers;
- `garbage`: answers every line with text that is not JSON-RPC;
- `banner`: prints a line that is not JSON-RPC, then behaves;
- `bad-result`: answers initialize with a result that is not MCP;
- `bad-schemas`: behaves, but lists tools whose input schemas are broken;
- `huge-line`: answers tools/call with one line of 2 MiB that never ends
  within the limit (no newline);
- `ignore-signals`: behaves, ignores SIGTERM, and does not exit when its
  stdin closes (only SIGKILL ends it).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

MODE = sys.argv[1]
MARKS = Path(sys.argv[2]) if len(sys.argv) > 2 else None

GOOD_TOOL = {
    "name": "fine",
    "description": "A tool with a usable schema.",
    "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}},
}
GOOD_TOOLS = [
    GOOD_TOOL,
    {"name": "crash", "description": "Exits mid-call.", "inputSchema": {"type": "object"}},
    {"name": "wait", "description": "Never answers.", "inputSchema": {"type": "object"}},
]
BROKEN_TOOLS = [
    GOOD_TOOL,
    {
        "name": "bad_type",
        "description": "Its schema names a type that does not exist.",
        "inputSchema": {"type": "object", "properties": {"x": {"type": "frobnicate"}}},
    },
    {
        "name": "not_object",
        "description": "Its schema is for a string.",
        "inputSchema": {"type": "object", "required": "x"},
    },
    {
        "name": "dangling_ref",
        "description": "Its $ref points at nothing.",
        "inputSchema": {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}},
    },
    {
        "name": "bad\u001b[31mname",
        "description": "Its name holds an escape sequence.",
        "inputSchema": {"type": "object"},
    },
]


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(request: dict) -> None:
    method = request.get("method")
    if "id" not in request:
        return  # a notification
    if method == "initialize":
        result = {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "1"},
        }
        if MODE == "bad-result":
            result = {"protocolVersion": 7, "serverInfo": "me"}
        send({"jsonrpc": "2.0", "id": request["id"], "result": result})
    elif method == "tools/list":
        tools = BROKEN_TOOLS if MODE == "bad-schemas" else GOOD_TOOLS
        send({"jsonrpc": "2.0", "id": request["id"], "result": {"tools": tools}})
    elif method == "tools/call":
        if MARKS is not None:
            (MARKS / "started").write_text("started")
        name = request["params"]["name"]
        if name == "crash":
            os._exit(3)
        if name == "wait":
            return
        if MODE == "huge-line":
            sys.stdout.write(f'{{"jsonrpc": "2.0", "id": {request["id"]}, "result": "')
            sys.stdout.write("x" * (2 << 20))
            sys.stdout.flush()
            time.sleep(60)
        text = json.dumps(request["params"].get("arguments"))
        send(
            {
                "jsonrpc": "2.0",
                "id": request["id"],
                "result": {"content": [{"type": "text", "text": text}]},
            }
        )
    else:
        send({"jsonrpc": "2.0", "id": request["id"], "result": {}})


def main() -> None:
    if MODE == "exit-at-start":
        print("raw_server: cannot open the frobnicator", file=sys.stderr, flush=True)
        sys.exit(4)
    if MODE == "exit-hostile":
        sys.stderr.write(os.environ["CANARY"] + "\n")
        sys.stderr.flush()
        sys.exit(4)
    if MODE == "ignore-signals":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if MODE == "banner":
        print("Welcome to raw_server 1.0!", flush=True)
    for line in sys.stdin:
        if MODE == "silent":
            continue
        if MODE == "garbage":
            print("this is not JSON-RPC", flush=True)
            continue
        answer(json.loads(line))
    if MODE == "ignore-signals":
        while True:
            time.sleep(1)


if __name__ == "__main__":
    main()
