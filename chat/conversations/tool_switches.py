"""Which tools a conversation has turned off (issue 30, point 1), and their
stored form.

The tools pane and the palette turn tools off for one conversation: all of
them, a server, or one tool of a server. What is off is kept with the
conversation (`Conversation.tool_switches`, the `tools_off` column), so that
reopening it, resuming it at start or forking it offers the model what it was
offered before. What is not named is on: a server added to the config later is
on in every conversation, and one removed keeps its switch should it come back.

Stored as JSON (`switches_json`, `switches_from_json`), '' for all on; a JSON
export carries the same value (`switches_data`, `switches_from_data`). What is
read back is checked; a value that is not what kvchat writes reads as all on
(the conversation still opens, and nothing is hidden from the user: the pane
shows what is on). No I/O here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

STORED_VERSION = 1
"""The version of the stored form; a newer one reads as all on."""

_MAX_ENTRIES = 10_000
"""More names than this are not kvchat's (a config has at most 64 servers of
1,000 tools)."""


@dataclass(frozen=True)
class ToolSwitches:
    """What is turned off in a conversation; the default: everything on."""

    all_off: bool = False
    """Every tool is off (the palette's "Turn tools on or off")."""
    servers: frozenset[str] = field(default_factory=frozenset)
    """Servers turned off, by their name in the config."""
    tools: frozenset[tuple[str, str]] = field(default_factory=frozenset)
    """(server, tool) turned off one by one."""

    @property
    def all_on(self) -> bool:
        return not (self.all_off or self.servers or self.tools)


def switches_data(switches: ToolSwitches) -> dict[str, object] | None:
    """The stored form as a JSON value (what a JSON export carries); None when
    everything is on."""
    if switches.all_on:
        return None
    return {
        "version": STORED_VERSION,
        "all_off": switches.all_off,
        "servers": sorted(switches.servers),
        "tools": [list(pair) for pair in sorted(switches.tools)],
    }


def switches_json(switches: ToolSwitches) -> str:
    """The stored form: '' when everything is on."""
    data = switches_data(switches)
    return "" if data is None else json.dumps(data, ensure_ascii=False)


def switches_from_json(text: str | None) -> ToolSwitches:
    """`switches_json` read back; anything else is all on."""
    if not text:
        return ToolSwitches()
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return ToolSwitches()
    return switches_from_data(data)


def switches_from_data(data: object) -> ToolSwitches:
    """`switches_data` read back (from the database or an imported file);
    anything else is all on."""
    if not isinstance(data, dict) or data.get("version") != STORED_VERSION:
        return ToolSwitches()
    all_off, servers, tools = data.get("all_off"), data.get("servers"), data.get("tools")
    if not isinstance(all_off, bool) or not isinstance(servers, list):
        return ToolSwitches()
    if not isinstance(tools, list) or len(servers) + len(tools) > _MAX_ENTRIES:
        return ToolSwitches()
    if not all(isinstance(name, str) for name in servers):
        return ToolSwitches()
    pairs: set[tuple[str, str]] = set()
    for pair in tools:
        if not (
            isinstance(pair, list) and len(pair) == 2 and all(isinstance(n, str) for n in pair)
        ):
            return ToolSwitches()
        pairs.add((pair[0], pair[1]))
    return ToolSwitches(all_off, frozenset(servers), frozenset(pairs))
