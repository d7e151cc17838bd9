"""Hostile files in the real app: `@/dev/stdin`, and a hostile config.toml.

`@/dev/stdin` in the app, run in a pseudo-terminal as `chat` runs
(the terminal driver reads the keys from that very terminal): the file is
refused in one sentence, nothing is sent, and the keys typed afterwards still
reach the prompt box (the app never reads its own terminal as a file)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.hostile_files import hostile_file
from tests.ui.app.quit_driver import CTRL_Q, MODEL_READY, Terminal, folders_env
from tests.ui.app.typing_driver import start_typing_driver


def test_at_dev_stdin_is_refused_and_the_keys_still_arrive(tmp_path: Path) -> None:
    typed = start_typing_driver(tmp_path)
    terminal = typed.terminal
    try:
        assert terminal.wait_for(MODEL_READY), terminal.output[-2000:]
        since = terminal.mark()
        terminal.send(b"what is in @/dev/stdin\r")
        assert terminal.wait_for(b"cannot be attached", timeout=30, since=since)
        terminal.send(b" then")
        assert terminal.wait_for(b"stdin then", timeout=30, since=since)
        terminal.send(CTRL_Q)
        assert terminal.wait_exit(20) == 0
    finally:
        terminal.close()
    outcome = typed.outcome()
    assert outcome["sent"] == []
    assert outcome["box"] == "what is in @/dev/stdin then"
    assert b"Traceback" not in terminal.output


@pytest.mark.parametrize(("kind", "why"), [("fifo", b"(FIFO)"), ("dev-zero", b"device")])
def test_the_app_starts_and_quits_with_a_hostile_config_file(
    tmp_path: Path, kind: str, why: bytes
) -> None:
    """`chat` itself in a pseudo-terminal, its config.toml a FIFO (opening it
    blocked before the first frame: a blank screen, Ctrl+Q dead) or a link to
    /dev/zero (read until the memory ran out): a notice says why, Ctrl+Q quits."""
    config = tmp_path / "config" / "config.toml"
    config.parent.mkdir(parents=True)
    hostile_file(kind, config)
    terminal = Terminal([sys.executable, "-m", "chat"], folders_env(tmp_path), (120, 40))
    try:
        # The notice is wrapped: look for a word of it that stays on one line.
        assert terminal.wait_for(why, timeout=60), terminal.output[-3000:]
        terminal.send(CTRL_Q)
        assert terminal.wait_exit(30) == 0
    finally:
        terminal.close()
    assert b"Traceback" not in terminal.output
