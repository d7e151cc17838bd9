"""The command line prints untrusted names and text to a terminal: the real
`chat` commands, in a pseudo-terminal, over a home folder whose every source
carries the canary payload. Nothing of it may reach the terminal as an
escape sequence, and each source must really have been printed."""

from __future__ import annotations

import pytest

from tests.security.canary import assert_no_leak
from tests.security.conftest import TAGS, HostileHome
from tests.ui.app.quit_driver import Terminal

COMMANDS = {
    "list": (["--list"], [TAGS["title"]]),
    "export-md": (["--export", "1"], [TAGS["title"], TAGS["user"], TAGS["reply"]]),
    "export-json": (["--export", "1", "--format", "json"], [TAGS["title"]]),
    "list-themes": (["--list-themes"], [TAGS["theme"], TAGS["theme_description"]]),
    "list-presets": (["--list-presets"], [TAGS["preset"], TAGS["preset_file"]]),
    "list-models": (["--list-models"], [TAGS["file_name"]]),
    "print-config": (
        ["--print-config"],
        [TAGS["tool_command"], TAGS["tool_key"], TAGS["tool_name"]],
    ),
}


def run_in_terminal(home: HostileHome, args: list[str], timeout: float = 60) -> bytes:
    terminal = Terminal(home.chat(*args), home.env, (160, 50))
    try:
        code = terminal.wait_exit(timeout)
        assert code is not None, terminal.output[-2000:]
        return terminal.output
    finally:
        terminal.close()


@pytest.mark.parametrize("name", COMMANDS)
def test_a_command_prints_no_escape_from_its_sources(hostile_home: HostileHome, name: str) -> None:
    args, tags = COMMANDS[name]
    output = run_in_terminal(hostile_home, args)
    assert b"Traceback" not in output, output[-3000:]
    assert_no_leak(output, *tags)


def test_a_reply_and_model_name_from_a_server(hostile_home: HostileHome) -> None:
    server = hostile_home.server.url
    output = run_in_terminal(hostile_home, ["-p", "hello", "--server", server])
    assert b"Traceback" not in output, output[-3000:]
    assert_no_leak(output, TAGS["server_reply"])
    # A model it does not serve: the error lists those it does, by name.
    output = run_in_terminal(
        hostile_home, ["-p", "hello", "--server", server, "--server-model", "missing"]
    )
    assert b"Traceback" not in output, output[-3000:]
    assert_no_leak(output, TAGS["server_model"])
