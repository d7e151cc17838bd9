"""The tool servers a user configured: the `mcpServers` file.

The format is the one Claude Desktop, Cursor and gptme read, so a file from
one of them works as it is (their other top-level keys are ignored):

    {"mcpServers": {
        "time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"]},
        "notes": {"url": "http://127.0.0.1:8000/mcp",
                  "headers": {"Authorization": "Bearer ${NOTES_TOKEN}"}}}}

An entry with `command` is a stdio server (`args`, `env` optional); one with
`url` is a streamable HTTP server (`headers` optional). `env` and `headers`
values may read kvchat's environment with `${VAR}` (chat.tools.references).
Both kinds may list `alwaysAllow` (tool names the user allows beforehand, as
Cline's files do) and set `disabled` (kept in the file, not started).

Read from `mcp.json` in kvchat's config folder, or from `--mcp-config FILE`
for one run. The file is untrusted: it is read with chat.safe_files (a FIFO,
a device or a huge file is refused), and every mistake is one sentence naming
the file and the entry; a bad entry is left out and the others are kept.
docs/tools.md is the user's manual of this format.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from chat import paths
from chat.safe_files import UnsafeFileError, read_text, shown_path
from chat.sanitize import sanitize_line
from chat.settings.user_files import did_you_mean
from chat.tools.references import reference_problem

CONFIG_FILE_LIMIT = 1 << 20
"""The largest file read: a real one is a few KiB."""
MAX_SERVERS = 64
MAX_ARGS = 1024
NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
"""Server names: they name log files and are written SERVER.TOOL (a later
`--allow-tool`), so no dots, slashes or spaces."""
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}\Z")  # an HTTP token
STDIO_TYPES = frozenset({"stdio"})
HTTP_TYPES = frozenset({"http", "streamable-http", "streamable_http", "streamableHttp"})
_COMMON_KEYS = frozenset({"type", "alwaysAllow", "disabled"})
STDIO_KEYS = _COMMON_KEYS | {"command", "args", "env"}
HTTP_KEYS = _COMMON_KEYS | {"url", "headers"}


@dataclass(frozen=True)
class StdioServerConfig:
    """A server kvchat starts as a program and talks to on its stdin/stdout."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    """As written: `${VAR}` references are read when the server starts."""
    always_allow: tuple[str, ...] = ()
    disabled: bool = False

    def describe(self) -> str:
        """One line for lists: the command as it would be typed."""
        return sanitize_line(" ".join((self.command, *self.args)))


@dataclass(frozen=True)
class HttpServerConfig:
    """A server kvchat reaches at a URL over streamable HTTP."""

    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    """As written: `${VAR}` references are read when the server starts."""
    always_allow: tuple[str, ...] = ()
    disabled: bool = False

    def describe(self) -> str:
        """The URL for messages and lists, without a user name or password in it."""
        parts = urlsplit(self.url)
        if parts.username is None and parts.password is None:
            return sanitize_line(self.url)
        host = parts.netloc.rpartition("@")[2]
        return sanitize_line(urlunsplit(parts._replace(netloc=host)))


ServerConfig = StdioServerConfig | HttpServerConfig


@dataclass(frozen=True)
class ToolServersConfig:
    """The servers of one run, and what was wrong in the file."""

    path: Path | None = None
    """The file read; None when there was none to read."""
    servers: tuple[ServerConfig, ...] = ()
    problems: tuple[str, ...] = ()
    """One sentence each, naming the file (and the entry, if it is one)."""
    unreadable: bool = False
    """The file as a whole could not be used (not JSON, not a file, too big)."""


def default_file() -> Path:
    return paths.mcp_config_file()


def load_tool_servers(path: Path | None = None) -> ToolServersConfig:
    """The servers in `path` (`--mcp-config`), or in kvchat's own `mcp.json`
    when None; a missing `mcp.json` is no servers and no problem, a missing
    `--mcp-config` file is an unreadable one."""
    explicit = path is not None
    file = path if path is not None else default_file()
    if not explicit and not _exists(file):
        return ToolServersConfig()
    try:
        text = read_text(file, CONFIG_FILE_LIMIT, what="tool server file")
    except UnsafeFileError as error:
        return ToolServersConfig(file, problems=(str(error),), unreadable=True)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        return _unreadable(
            file, f"is not JSON (line {error.lineno}, column {error.colno}: {error.msg})"
        )
    except RecursionError:
        return _unreadable(file, "is not JSON kvchat can read: it is nested too deeply")
    return parse_document(file, document)


def _exists(file: Path) -> bool:
    try:
        return file.exists() or file.is_symlink()
    except OSError:
        return True  # let the read say what is wrong


def _unreadable(file: Path, why: str) -> ToolServersConfig:
    return ToolServersConfig(
        file, problems=(f"The tool server file {shown_path(file)} {why}.",), unreadable=True
    )


def parse_document(file: Path, document: object) -> ToolServersConfig:
    """The servers of an already parsed file."""
    if not isinstance(document, dict):
        return _unreadable(file, f"holds {_json_type(document)}, not an object with mcpServers")
    entries = document.get("mcpServers")
    if entries is None:
        return _unreadable(file, 'has no "mcpServers" object')
    if not isinstance(entries, dict):
        return _unreadable(file, f'has "mcpServers" as {_json_type(entries)}, not an object')
    servers: list[ServerConfig] = []
    problems: list[str] = []
    for index, (name, entry) in enumerate(entries.items()):
        if index == MAX_SERVERS:
            problems.append(
                f"{shown_path(file)}: more than {MAX_SERVERS} servers; the rest are left out."
            )
            break
        if not NAME_PATTERN.match(name):
            problems.append(
                f"{shown_path(file)}: the server name {_quoted(name)} is not usable "
                "(letters, digits, '-' and '_', at most 64); it is left out."
            )
            continue
        server, entry_problems = _parse_entry(name, entry)
        problems.extend(f"{shown_path(file)}: server '{name}': {p}" for p in entry_problems)
        if server is not None:
            servers.append(server)
    return ToolServersConfig(file, tuple(servers), tuple(problems))


class _EntryError(Exception):
    """A mistake that leaves the entry out; its text is the reason."""


def _parse_entry(name: str, entry: object) -> tuple[ServerConfig | None, list[str]]:
    """The server of one entry (None if it cannot be used) and every problem:
    the one that left it out last, notes (unknown keys) before it."""
    notes: list[str] = []
    try:
        if not isinstance(entry, dict):
            raise _EntryError(f"is {_json_type(entry)}, not an object")
        kind = _kind(entry)
        known = STDIO_KEYS if kind == "stdio" else HTTP_KEYS
        for key in entry:
            if key not in known:
                notes.append(
                    f"the key {_quoted(key)} is not one kvchat reads, ignored"
                    + did_you_mean(key, known)
                )
        always_allow = tuple(_string_list(entry, "alwaysAllow"))
        disabled = entry.get("disabled", False)
        if not isinstance(disabled, bool):
            raise _EntryError(f"'disabled' is {_json_type(disabled)}, not true or false")
        server: ServerConfig
        if kind == "stdio":
            server = StdioServerConfig(
                name,
                _command(entry),
                tuple(_string_list(entry, "args", limit=MAX_ARGS)),
                _string_map(entry, "env", _ENV_NAME, "an environment variable name"),
                always_allow,
                disabled,
            )
        else:
            server = HttpServerConfig(
                name,
                _url(entry),
                _string_map(entry, "headers", _HEADER_NAME, "an HTTP header name"),
                always_allow,
                disabled,
            )
    except _EntryError as error:
        return None, [*notes, f"{error}; it is left out."]
    return server, notes


def _kind(entry: dict[str, Any]) -> str:
    declared = entry.get("type")
    if declared is not None and not isinstance(declared, str):
        raise _EntryError(f"'type' is {_json_type(declared)}, not a string")
    if declared == "sse":
        raise _EntryError(
            "'type' is \"sse\", the old HTTP transport kvchat does not speak; "
            "a server that has streamable HTTP serves it at a URL of its own (often /mcp)"
        )
    if declared is not None and declared not in STDIO_TYPES | HTTP_TYPES:
        raise _EntryError(f'\'type\' is {_quoted(declared)}: kvchat knows "stdio" and "http"')
    has_command, has_url = "command" in entry, "url" in entry
    if has_command and has_url:
        raise _EntryError("it has both 'command' and 'url'; give one")
    if declared in STDIO_TYPES or (declared is None and has_command):
        if not has_command:
            raise _EntryError("'command' is missing")
        return "stdio"
    if declared in HTTP_TYPES or has_url:
        if not has_url:
            raise _EntryError("'url' is missing")
        return "http"
    raise _EntryError("it has neither 'command' (a program) nor 'url' (an HTTP server)")


def _command(entry: dict[str, Any]) -> str:
    command = entry["command"]
    if not isinstance(command, str):
        raise _EntryError(f"'command' is {_json_type(command)}, not a string")
    if not command.strip():
        raise _EntryError("'command' is empty")
    if "\x00" in command:
        raise _EntryError("'command' holds a NUL character")
    return command


def _url(entry: dict[str, Any]) -> str:
    url = entry["url"]
    if not isinstance(url, str):
        raise _EntryError(f"'url' is {_json_type(url)}, not a string")
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises on a port that is not a number
    except ValueError:
        raise _EntryError(f"'url' {_quoted(url)} is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _EntryError(f"'url' {_quoted(url)} is not an http:// or https:// URL")
    if any(ord(char) < 0x21 or ord(char) == 0x7F for char in url):
        raise _EntryError(f"'url' {_quoted(url)} holds spaces or control characters")
    return url


def _string_list(entry: dict[str, Any], key: str, *, limit: int = MAX_ARGS) -> list[str]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _EntryError(f"'{key}' must be a list of strings")
    if len(value) > limit:
        raise _EntryError(f"'{key}' has more than {limit} items")
    if any("\x00" in item for item in value):
        raise _EntryError(f"'{key}' holds a NUL character")
    return value


def _string_map(
    entry: dict[str, Any], key: str, name_pattern: re.Pattern[str], what: str
) -> dict[str, str]:
    value = entry.get(key, {})
    if not isinstance(value, dict):
        raise _EntryError(f"'{key}' is {_json_type(value)}, not an object")
    result: dict[str, str] = {}
    for name, item in value.items():
        if not name_pattern.match(name):
            raise _EntryError(f"'{key}' has {_quoted(name)}, which is not {what}")
        if not isinstance(item, str):
            raise _EntryError(f"'{key}' gives {name} {_json_type(item)}, not a string")
        if "\x00" in item or (key == "headers" and ("\r" in item or "\n" in item)):
            raise _EntryError(f"'{key}' gives {name} a value with control characters")
        problem = reference_problem(item)
        if problem is not None:
            raise _EntryError(f"'{key}' gives {name} a value where {problem}")
        result[name] = item
    return result


def _json_type(value: object) -> str:
    """What `value` is, in JSON's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _quoted(text: str) -> str:
    """Untrusted text from the file, for a message: one line, no escapes, short."""
    shown = sanitize_line(text)
    return repr(shown if len(shown) <= 80 else shown[:77] + "...")
