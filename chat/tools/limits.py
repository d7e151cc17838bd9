"""How long kvchat waits for a tool server, and how much it reads from one.

The defaults are for real servers on a user's machine; the tests pass small
ones. docs/tools.md lists them for users.
"""

from __future__ import annotations

from dataclasses import dataclass

from chat.tools.results import RESULT_LIMIT


@dataclass(frozen=True)
class Limits:
    start_timeout_s: float = 30.0
    """From starting a server to its tool list: a server that downloads
    itself first (npx, uvx) needs some of it."""
    call_timeout_s: float = 120.0
    """One tool call, unless the caller gives its own."""
    message_bytes: int = 32 << 20
    """One JSON-RPC message from a server; a larger one stops the server."""
    result_bytes: int = RESULT_LIMIT
    """One tool result, as text; a larger one is cut with a note."""
    max_tools: int = 1000
    """Tools read from one server's list; the rest are left out."""
    close_wait_s: float = 8.0
    """The most closing waits for all servers together. Each stdio server's
    own shutdown is bounded well below it (chat.tools.stdio); past it, what is
    left is cancelled (its shielded shutdown still kills the processes)."""
