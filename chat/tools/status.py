"""What a tool server is doing and what it offers, as values the UI can draw.

Everything here came from the server and is untrusted: names, descriptions
and problems are made safe for one line (chat.sanitize) before they are put
here; the input schema is kept as sent (it goes to the model, not on screen).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from chat.tools.config import ServerConfig


class ServerState(Enum):
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"
    STOPPED = "stopped"


@dataclass(frozen=True)
class ToolInfo:
    """One tool a server lists."""

    name: str
    """As the server spells it: calls must use exactly this."""
    description: str
    input_schema: Mapping[str, Any]
    problem: str | None = None
    """Why the tool cannot be used (its input schema is broken), or None."""

    @property
    def usable(self) -> bool:
        return self.problem is None


@dataclass(frozen=True)
class ServerStatus:
    """One server as it is now; a new value replaces it at each change."""

    config: ServerConfig
    state: ServerState = ServerState.STARTING
    tools: tuple[ToolInfo, ...] = ()
    problem: str | None = None
    """FAILED: why, in one sentence that names the server. STOPPED: why it was
    not started (disabled in the file), or None after a normal close."""
    server_name: str = ""
    """The name the server gives itself (its `serverInfo`), for the tools pane."""
    pid: int | None = None
    """A stdio server's process while it runs."""

    @property
    def name(self) -> str:
        """The name of its entry in the config file."""
        return self.config.name

    def tool(self, name: str) -> ToolInfo | None:
        return next((tool for tool in self.tools if tool.name == name), None)
