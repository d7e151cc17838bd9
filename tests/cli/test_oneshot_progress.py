"""`chat -p` with a long prompt shows its progress on stderr when that is a
terminal (a real pseudo-terminal here), erased before the reply, and nothing
when stderr is a pipe. Real subprocess, real demo model."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.model

# About 2,000 tokens: several batches, well over the 0.3 s before progress shows.
LONG_PROMPT = "Summarise this: " + " ".join(f"word{i % 90}" for i in range(650))
ARGS = ("-p", LONG_PROMPT, "--temperature", "0", "--max-tokens", "4", "--ctx", "4096")


def test_progress_is_drawn_on_a_terminal_and_erased(demo_model: Path) -> None:
    master, slave = pty.openpty()
    try:
        chat = subprocess.Popen(
            [sys.executable, "-m", "chat", *ARGS],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=slave,
        )
        os.close(slave)
        terminal = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            terminal += chunk
        out, _ = chat.communicate(timeout=120)
    finally:
        os.close(master)
    assert chat.returncode == 0, terminal
    assert out.strip()  # the reply, on stdout as usual
    text = terminal.decode()
    assert "Reading prompt: " in text
    assert " tokens" in text and "Ctrl+C stops" in text
    # Each line overwrites the last, and the last thing written erases it.
    assert text.startswith("\r\x1b[2K")
    assert text.endswith("\r\x1b[2K")
    lines = [line for line in text.split("\r\x1b[2K") if line]
    assert all(line.startswith("Reading prompt: ") for line in lines)
    # Figures once a batch is done: "1,024 / 2,0xx tokens · 1,234 tok/s · 2 s left".
    assert any("tok/s" in line and "left" in line for line in lines)


def test_no_progress_on_a_pipe(demo_model: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "chat", *ARGS],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.strip()
