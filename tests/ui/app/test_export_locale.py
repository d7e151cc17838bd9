"""Ctrl+E under a locale whose encoding is not UTF-8 (issue 27): the real app
in a pseudo-terminal with LC_ALL=C and Python's UTF-8 mode off exports a
conversation whose title (its first message) the file system's encoding
(ASCII) cannot hold. The
file gets the title's ASCII letters; the app goes on and quits cleanly. (No
model is needed: the conversation opens, and exports, while none is loaded.)

Before: the export's file name raised UnicodeEncodeError and the app crashed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import chat
from tests.ui.app.quit_driver import CTRL_Q, Terminal, folders_env

CTRL_E = b"\x05"
CHAT = [sys.executable, "-m", "chat"]


def test_ctrl_e_exports_under_lc_all_c(tmp_path: Path) -> None:
    env = folders_env(tmp_path)
    source = tmp_path / "import.json"
    source.write_text(
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "Où est le café ?"},
                    {"role": "assistant", "content": "À côté — 東京駅の近く."},
                ],
            }
        ),
        encoding="utf-8",
    )
    subprocess.run(
        [*CHAT, "--import", str(source)],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    env = {k: v for k, v in env.items() if k not in ("LANG", "PYTHONIOENCODING")}
    # Run from another folder (the export goes to the current one): this
    # checkout's `chat` comes first all the same.
    env.update(LC_ALL="C", PYTHONUTF8="0", PYTHONPATH=str(Path(chat.__file__).parents[1]))
    work = tmp_path / "work"
    work.mkdir()
    terminal = Terminal([*CHAT, "--continue"], env, (120, 40), cwd=work)
    try:
        # The conversation on screen (what ASCII cannot show, escaped).
        assert terminal.wait_for(b"est le caf", 60), terminal.output[-2000:]
        terminal.send(CTRL_E)
        deadline = time.monotonic() + 30
        while not list(work.glob("*.md")) and time.monotonic() < deadline:
            time.sleep(0.05)  # a poll of the folder the other process writes to
        terminal.send(CTRL_Q)
        code = terminal.wait_exit(30)
    finally:
        terminal.close()
    output = terminal.output
    assert b"Traceback" not in output, output[-3000:]
    assert code == 0, output[-3000:]
    (exported,) = work.glob("*.md")
    assert exported.name == "ou-est-le-cafe-1.md"  # from "Où est le café ?"
    assert "東京駅の近く" in exported.read_text(encoding="utf-8")
