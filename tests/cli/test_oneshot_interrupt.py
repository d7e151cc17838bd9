"""Ctrl+C while `chat -p` loads the model: llama.cpp is running C code, and the
only Python code that runs meanwhile is its log callback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def test_ctrl_c_during_the_model_load_stops_before_any_reply(
    demo_model: Path, tmp_path: Path
) -> None:
    log = tmp_path / "state" / "llama.log"
    env = dict(os.environ, KVCHAT_STATE_DIR=str(log.parent))
    chat = subprocess.Popen(
        [sys.executable, "-m", "chat", "-p", "Tell a long story.", "--max-tokens", "200"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    # llama.cpp's first log line: the load has begun.
    deadline = time.monotonic() + 60
    while not (log.exists() and log.stat().st_size > 0):
        assert chat.poll() is None and time.monotonic() < deadline
        time.sleep(0.001)  # a poll: the load takes a fraction of a second
    chat.send_signal(signal.SIGINT)
    out, err = chat.communicate(timeout=60)
    assert chat.returncode == 130
    assert out == ""  # no reply nobody wants any more
    assert err == ""  # no traceback, no "Exception ignored"
