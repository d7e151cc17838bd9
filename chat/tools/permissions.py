"""Whether a tool may run: nothing is allowed unless someone said so.

Before each call the user is asked (the UI's dialog, or one-shot mode's
`--allow-tool`); the answer is one of `Choice`. "Always for this tool" and
"always for this server" last: they are saved in `tool-permissions.json`
in kvchat's data folder (written whole to a temporary file, then renamed
over the old one), listed by `Permissions.lasting()` and taken back by
`revoke()`. A config file may allow tools beforehand (`alwaysAllow` of an
`mcpServers` entry) and one-shot mode takes `--allow-tool SERVER.TOOL`:
those last for the run and are not saved.

A permission file that cannot be read is left as it is (never overwritten):
nothing in it is allowed, `problem` says where it is and why, and choices
made meanwhile last only for the run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from chat import paths
from chat.errors import ConfigError
from chat.safe_files import UnsafeFileError, read_text, shown_path
from chat.tools.config import ServerConfig
from chat.whole_files import replace_whole

FILE_LIMIT = 1024 * 1024


def default_file() -> Path:
    return paths.tool_permissions_file()


_VERSION = 1


class Choice(Enum):
    """The user's answer to one call."""

    ONCE = "once"
    TOOL = "tool"
    """This tool of this server, from now on."""
    SERVER = "server"
    """Every tool of this server, from now on."""
    REFUSE = "refuse"


@dataclass(frozen=True, order=True)
class Grant:
    """A lasting permission: one tool of a server, or all of them (`tool` None)."""

    server: str
    tool: str | None = None

    def covers(self, server: str, tool: str) -> bool:
        return self.server == server and self.tool in (None, tool)

    def describe(self) -> str:
        if self.tool is None:
            return f"every tool of the server '{self.server}'"
        return f"the tool '{self.tool}' of the server '{self.server}'"


def parse_allow_tool(text: str) -> Grant:
    """`SERVER.TOOL` (one-shot mode's `--allow-tool`), or `SERVER.*` for every
    tool of a server. Raises ConfigError with a sentence."""
    server, dot, tool = text.partition(".")
    if not dot or not server or not tool:
        raise ConfigError(
            f"--allow-tool takes SERVER.TOOL (a server's name in mcp.json, a dot, a tool's "
            f"name), not {text!r}."
        )
    return Grant(server, None if tool == "*" else tool)


class Permissions:
    """What may run in this run: the saved grants, and those given beforehand."""

    def __init__(self, file: Path | None, beforehand: Iterable[Grant] = ()) -> None:
        """`file`: where lasting choices are saved (`default_file()`; a test
        passes its own), or None for none at all: one-shot mode runs only
        what its command line and config allow, and lasting choices then
        hold for the run. `beforehand`: grants of the config and the
        command line, for this run only."""
        self.file = file
        self.beforehand = frozenset(beforehand)
        self.problem: str | None = None
        """Why the saved file is not used (it cannot be read), or None."""
        self._saved: set[Grant] = set(self._load())
        self._session: set[Grant] = set()
        """Lasting choices that could not be saved (the file is unreadable)."""

    @classmethod
    def from_config(
        cls, servers: Iterable[ServerConfig], allow: Iterable[Grant] = (), file: Path | None = None
    ) -> Permissions:
        """The config's `alwaysAllow` and `allow` (`--allow-tool`) beforehand."""
        beforehand = {Grant(s.name, tool) for s in servers for tool in s.always_allow}
        return cls(file, beforehand | set(allow))

    def allowed(self, server: str, tool: str) -> str | None:
        """Why `tool` of `server` may run without asking, in words; None: ask."""
        for grant in self.beforehand:
            if grant.covers(server, tool):
                return "allowed beforehand (the config or --allow-tool)"
        for grant in self._saved | self._session:
            if grant.covers(server, tool):
                return "allowed before: " + (
                    "always for this server" if grant.tool is None else "always for this tool"
                )
        return None

    def record(self, choice: Choice, server: str, tool: str) -> None:
        """Keep the choices that last (saved at once); ONCE and REFUSE keep
        nothing. Raises ConfigError when the file cannot be written (the
        choice still holds for this run)."""
        if choice is Choice.TOOL:
            grant = Grant(server, tool)
        elif choice is Choice.SERVER:
            grant = Grant(server)
        else:
            return
        if self.problem is not None or self.file is None:
            self._session.add(grant)
            return
        self._saved.add(grant)
        try:
            self._save()
        except ConfigError:
            self._saved.discard(grant)
            self._session.add(grant)
            raise

    def lasting(self) -> list[Grant]:
        """The saved grants (and those kept for the run when the file could
        not be used), for the tools pane to list."""
        return sorted(self._saved | self._session)

    def revoke(self, grant: Grant) -> bool:
        """Take a lasting grant back; False when there was none such."""
        if grant in self._session:
            self._session.discard(grant)
            return True
        if grant not in self._saved:
            return False
        self._saved.discard(grant)
        try:
            self._save()
        except ConfigError:
            self._saved.add(grant)
            raise
        return True

    def _load(self) -> list[Grant]:
        if self.file is None:
            return []
        try:
            if not self.file.exists():
                return []
            text = read_text(self.file, FILE_LIMIT, what="tool permission file")
        except UnsafeFileError as error:
            self.problem = str(error)
            return []
        try:
            document = json.loads(text)
        except ValueError as error:
            where = shown_path(self.file)
            self.problem = (
                f"The tool permission file {where} is not JSON ({error}); it is left as it is."
            )
            return []
        if not isinstance(document, dict):
            document = {}
        entries = document.get("allowed")
        if document.get("version") != _VERSION or not isinstance(entries, list):
            self.problem = (
                f"The tool permission file {shown_path(self.file)} is not one kvchat wrote "
                "(no version 1 and 'allowed' list); it is left as it is."
            )
            return []
        grants = []
        for entry in entries:
            if isinstance(entry, dict) and isinstance(entry.get("server"), str):
                tool = entry.get("tool")
                grants.append(Grant(entry["server"], tool if isinstance(tool, str) else None))
        return grants

    def _save(self) -> None:
        if self.file is None:
            return
        document = {
            "version": _VERSION,
            "allowed": [
                {"server": g.server, **({"tool": g.tool} if g.tool is not None else {})}
                for g in sorted(self._saved)
            ],
        }
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            replace_whole(self.file, json.dumps(document, indent=2) + "\n")
        except OSError as error:
            raise ConfigError(
                f"Cannot save the tool permissions to {shown_path(self.file)}: "
                f"{error.strerror or error}."
            ) from error
