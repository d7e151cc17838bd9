"""The tool server file: the `mcpServers` format other clients write, and
every way an untrusted file can be wrong, each one sentence naming the file
and the entry, the good entries kept."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from chat import paths
from chat.tools.config import (
    CONFIG_FILE_LIMIT,
    HttpServerConfig,
    StdioServerConfig,
    load_tool_servers,
)


def write(path: Path, document: object) -> Path:
    path.write_text(json.dumps(document))
    return path


def test_a_file_as_claude_desktop_writes_it(tmp_path: Path) -> None:
    file = write(
        tmp_path / "claude_desktop_config.json",
        {
            "globalShortcut": "Ctrl+Space",  # Claude Desktop's own keys: ignored
            "mcpServers": {
                "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
                "notes": {
                    "url": "https://notes.example/mcp",
                    "headers": {"Authorization": "Bearer ${NOTES_TOKEN}"},
                    "alwaysAllow": ["search"],
                },
                "off": {"command": "x", "disabled": True},
                "typed": {"type": "http", "url": "http://127.0.0.1:9/mcp"},
            },
        },
    )
    config = load_tool_servers(file)
    assert config.problems == () and not config.unreadable
    time, notes, off, typed = config.servers
    assert time == StdioServerConfig("time", "uvx", ("mcp-server-time",), {"TZ": "UTC"})
    # The reference is kept as written: the secret is read when the server starts.
    assert notes == HttpServerConfig(
        "notes",
        "https://notes.example/mcp",
        {"Authorization": "Bearer ${NOTES_TOKEN}"},
        ("search",),
    )
    assert isinstance(off, StdioServerConfig) and off.disabled
    assert isinstance(typed, HttpServerConfig)
    assert time.describe() == "uvx mcp-server-time"


def test_a_password_in_a_url_is_never_shown() -> None:
    server = HttpServerConfig("x", "https://me:s3cret@notes.example:8443/mcp?a=1")
    assert server.describe() == "https://notes.example:8443/mcp?a=1"


def test_the_default_file_is_mcp_json_in_the_config_folder() -> None:
    assert paths.mcp_config_file() == paths.config_dir() / "mcp.json"
    # None there: no servers, and nothing to say.
    config = load_tool_servers()
    assert config.servers == () and config.problems == () and config.path is None


def test_the_default_file_is_read_when_there(tmp_path: Path) -> None:
    paths.config_dir().mkdir(parents=True)
    write(paths.mcp_config_file(), {"mcpServers": {"a": {"command": "a"}}})
    config = load_tool_servers()
    assert [server.name for server in config.servers] == ["a"]


def test_a_missing_file_given_for_the_run_is_said(tmp_path: Path) -> None:
    config = load_tool_servers(tmp_path / "nope.json")
    assert config.unreadable
    assert config.problems == (
        f"The tool server file {tmp_path / 'nope.json'} cannot be opened: "
        "no such file or directory.",
    )


@pytest.mark.parametrize(
    ("text", "sentence"),
    [
        (
            "{not json",
            "is not JSON (line 1, column 2: Expecting property name enclosed in double quotes).",
        ),
        ("[1, 2]", "holds a list, not an object with mcpServers."),
        ('{"servers": {}}', 'has no "mcpServers" object.'),
        ('{"mcpServers": []}', 'has "mcpServers" as a list, not an object.'),
        ("[" * 100_000, "is not JSON kvchat can read: it is nested too deeply."),
    ],
)
def test_a_file_that_cannot_be_used(tmp_path: Path, text: str, sentence: str) -> None:
    file = tmp_path / "mcp.json"
    file.write_text(text)
    config = load_tool_servers(file)
    assert config.unreadable and config.servers == ()
    assert config.problems == (f"The tool server file {file} {sentence}",)


def test_a_huge_file_is_not_read(tmp_path: Path) -> None:
    file = tmp_path / "mcp.json"
    file.write_text('{"mcpServers": {}, "pad": "' + "x" * CONFIG_FILE_LIMIT + '"}')
    config = load_tool_servers(file)
    assert config.unreadable
    assert config.problems == (f"The tool server file {file} is larger than 1 MiB: not read.",)


def test_a_fifo_is_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "mcp.json"
    os.mkfifo(fifo)
    config = load_tool_servers(fifo)  # would block forever if opened plainly
    assert config.unreadable
    assert "is a pipe (FIFO): only regular files are read." in config.problems[0]


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("just a string", "is a string, not an object"),
        ({}, "it has neither 'command' (a program) nor 'url' (an HTTP server)"),
        ({"command": 5}, "'command' is a number, not a string"),
        ({"command": " "}, "'command' is empty"),
        ({"command": "a", "args": "b c"}, "'args' must be a list of strings"),
        ({"command": "a", "args": ["ok", 3]}, "'args' must be a list of strings"),
        ({"command": "a", "env": ["A=1"]}, "'env' is a list, not an object"),
        ({"command": "a", "env": {"A": 1}}, "'env' gives A a number, not a string"),
        (
            {"command": "a", "env": {"A=B": "1"}},
            "'env' has 'A=B', which is not an environment variable name",
        ),
        (
            {"command": "a", "env": {"A": "${"}},
            "'env' gives A a value where a '${' has no closing '}'",
        ),
        (
            {"command": "a", "env": {"A": "${1X}"}},
            "'env' gives A a value where '${1X}' does not name an environment variable",
        ),
        ({"command": "a", "url": "http://x"}, "it has both 'command' and 'url'; give one"),
        ({"url": "ftp://x/mcp"}, "'url' 'ftp://x/mcp' is not an http:// or https:// URL"),
        (
            {"url": "http://x:port/"},
            "'url' 'http://x:port/' is not a URL",
        ),
        (
            {"url": "http://x/", "headers": {"A": "b\r\nEvil: 1"}},
            "'headers' gives A a value with control characters",
        ),
        (
            {"url": "http://x/", "headers": {"Bad Name": "1"}},
            "'headers' has 'Bad Name', which is not an HTTP header name",
        ),
        (
            {"type": "sse", "url": "http://x/sse"},
            "'type' is \"sse\", the old HTTP transport kvchat does not speak; a server that "
            "has streamable HTTP serves it at a URL of its own (often /mcp)",
        ),
        (
            {"type": "websocket", "url": "ws://x"},
            "'type' is 'websocket': kvchat knows \"stdio\" and \"http\"",
        ),
        ({"type": "stdio", "url": "http://x/"}, "'command' is missing"),
        ({"command": "a", "disabled": "yes"}, "'disabled' is a string, not true or false"),
        ({"command": "a", "alwaysAllow": "all"}, "'alwaysAllow' must be a list of strings"),
    ],
)
def test_a_bad_entry_is_left_out_and_the_others_kept(
    tmp_path: Path, entry: object, problem: str
) -> None:
    file = write(tmp_path / "mcp.json", {"mcpServers": {"bad": entry, "good": {"command": "g"}}})
    config = load_tool_servers(file)
    assert [server.name for server in config.servers] == ["good"]
    assert config.problems == (f"{file}: server 'bad': {problem}; it is left out.",)


def test_unknown_keys_are_named_and_the_entry_kept(tmp_path: Path) -> None:
    file = write(
        tmp_path / "mcp.json",
        {"mcpServers": {"a": {"command": "a", "arg": ["x"], "timeout": 5}}},
    )
    config = load_tool_servers(file)
    assert [server.name for server in config.servers] == ["a"]
    assert config.problems == (
        f"{file}: server 'a': the key 'arg' is not one kvchat reads, ignored; did you mean 'args'?",
        f"{file}: server 'a': the key 'timeout' is not one kvchat reads, ignored.",
    )


def test_names_that_cannot_be_used(tmp_path: Path) -> None:
    file = write(
        tmp_path / "mcp.json",
        {"mcpServers": {"with space": {"command": "a"}, "evil\u001b]0;x\u0007": {"command": "a"}}},
    )
    config = load_tool_servers(file)
    assert config.servers == ()
    assert config.problems[0] == (
        f"{file}: the server name 'with space' is not usable "
        "(letters, digits, '-' and '_', at most 64); it is left out."
    )
    # The escape sequence in the name is not passed on to the terminal.
    assert "\u001b" not in config.problems[1] and "'evil'" in config.problems[1]


def test_too_many_servers(tmp_path: Path) -> None:
    entries = {f"s{i}": {"command": "a"} for i in range(70)}
    config = load_tool_servers(write(tmp_path / "mcp.json", {"mcpServers": entries}))
    assert len(config.servers) == 64
    assert config.problems == (
        f"{tmp_path / 'mcp.json'}: more than 64 servers; the rest are left out.",
    )
