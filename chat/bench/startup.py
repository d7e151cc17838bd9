"""Startup, as a user waits for it: `chat --model MODEL` in a pseudo-terminal.

Seconds from the start of the process to the first frame (target < 0.5 s,
docs/performance.md; the model loads in the background after it), to the
model being ready, and the
app's resident memory beyond the model file once it is."""

from __future__ import annotations

import os
import re
import select
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from chat.bench.rows import Options, Row
from chat.paths import CONFIG_DIR_ENV, DATA_DIR_ENV, STATE_DIR_ENV

# What the screen shows once the app's layout is drawn (the prompt box's
# placeholder), and once the model is ready (the status bar's window size).
FIRST_FRAME_MARK = b"Enter to send"
MODEL_READY_MARK = b" ctx"
ESCAPE_SEQUENCE = re.compile(rb"\x1b\[[0-9;?<>=$]*[A-Za-z~]|\x1b\][^\x07]*\x07")


def installed_python_env(scratch: Path) -> dict[str, str]:
    """The environment of an installed kvchat, with its own empty config, data and state.

    pip compiles a wheel's modules when it installs them. A source checkout run
    with PYTHONDONTWRITEBYTECODE=1 (as CI and this VM set it) would compile
    every kvchat module again at each start instead, which is not what a user
    waits for. The bytecode goes to a scratch folder, not into the checkout."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(scratch / "pycache")
    env[CONFIG_DIR_ENV] = str(scratch / "config")
    env[DATA_DIR_ENV] = str(scratch / "data")
    env[STATE_DIR_ENV] = str(scratch / "state")
    env["TERM"] = "xterm-256color"
    return env


@dataclass
class StartupTimes:
    first_frame_s: float
    model_ready_s: float
    rss_mb: float
    """The app's resident memory once the model is ready."""


def launch(model: Path, env: dict[str, str], timeout: float = 300) -> StartupTimes:
    """Start `chat --model MODEL` in a 120x40 pseudo-terminal, as a user does, and
    read what it draws: seconds from the start of the process to the first frame,
    and to the model being ready (it loads in the background after that frame)."""
    import fcntl
    import pty
    import signal
    import struct
    import termios

    started = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:  # the child: become the app
        try:
            os.execve(sys.executable, [sys.executable, "-m", "chat", "--model", str(model)], env)
        finally:
            os._exit(127)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    screen, checked, first_frame = b"", 0, None
    try:
        while True:
            readable, _, _ = select.select([fd], [], [], timeout)
            if not readable:
                raise TimeoutError(f"chat drew nothing for {timeout:.0f} s")
            try:
                screen += os.read(fd, 1 << 16)
            except OSError:  # the app exited
                tail = ESCAPE_SEQUENCE.sub(b"", screen)[-400:].decode(errors="replace")
                raise RuntimeError(f"chat exited during startup; its last output: {tail}") from None
            # Only what arrived since the last look (and a little before it, for
            # a mark or an escape sequence split between reads): the screen is
            # redrawn many times while the model loads, and this process shares
            # the CPU with the app it times.
            text = ESCAPE_SEQUENCE.sub(b"", screen[max(0, checked - 256) :])
            checked = len(screen)
            if first_frame is None and FIRST_FRAME_MARK in text:
                first_frame = time.perf_counter() - started
            if first_frame is not None and MODEL_READY_MARK in text:
                return StartupTimes(first_frame, time.perf_counter() - started, resident_mb(pid))
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)


def resident_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / 1e6
    return float("nan")


def startup_rows(options: Options) -> list[Row]:
    env = installed_python_env(Path(tempfile.mkdtemp(prefix="kvchat-bench-")))
    launch(options.model, env)  # compiles the bytecode, as pip install does
    launches = [launch(options.model, env) for _ in range(2 if options.quick else 5)]
    first_frame = statistics.median(each.first_frame_s for each in launches)
    ready = statistics.median(each.model_ready_s for each in launches)
    rss = statistics.median(each.rss_mb for each in launches)
    model_mb = options.model.stat().st_size / 1e6
    return [
        Row(
            "startup to first frame (the model loads after it)",
            first_frame,
            "s",
            "< 0.5 s",
            first_frame < 0.5,
            "`chat` in a pseudo-terminal",
        ),
        Row("startup to model ready (loading included)", ready, "s"),
        Row(
            "resident memory beyond the model file",
            rss - model_mb,
            "MB",
            note=f"`chat` with the model ready; model file {model_mb:.0f} MB",
        ),
    ]
